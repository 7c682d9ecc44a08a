//! The progress of a measurement: the steps every bench reports, and their display on stderr.
use anyhow::Result;

/// Progress, for the caller to show where it likes.
pub enum Step<'a> {
    /// A measurement starts: `round 2/3: tc udp64`.
    Begin(&'a str),
    /// It ended with this result.
    End(&'a str),
    /// Something to note on a line of its own.
    Note(&'a str),
}

/// Shows the progress on stderr: what is measured, then its result on the same line.
#[derive(Default)]
struct Progress {
    midline: bool,
}

impl Progress {
    fn show(&mut self, step: Step<'_>) {
        let (text, ends_line) = match step {
            Step::Begin(what) => (format!("{what} ... "), false),
            Step::End(text) | Step::Note(text) => (format!("{text}\n"), true),
        };
        eprint!("{text}");
        self.midline = !ends_line;
    }

    /// Ends the line a measurement that failed left open: the error gets a line of its own.
    fn close(&self) {
        if self.midline {
            eprintln!("failed");
        }
    }
}

/// Shows the measurement's progress on stderr, a line per step, while `work` runs.
pub fn show_steps<T>(work: impl FnOnce(&mut dyn FnMut(Step<'_>)) -> Result<T>) -> Result<T> {
    let mut progress = Progress::default();
    let result = work(&mut |step| progress.show(step));
    progress.close();
    result
}
