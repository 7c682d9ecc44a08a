//! The interactive screen: the alternate screen, stdin in non-canonical mode so a single `q`
//! quits, and the signal handlers; all undone on every exit path.
use std::{
    io::{self, IsTerminal, Read, Write},
    os::fd::AsFd,
    sync::{
        Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Instant,
};

use anyhow::{Context, Result};
use nix::{
    poll::{PollFd, PollFlags, PollTimeout, poll},
    sys::{
        signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction},
        termios::{self, LocalFlags, SetArg, SpecialCharacterIndices, Termios},
    },
};

/// Set by SIGINT, SIGTERM and SIGHUP while the screen is up.
pub(super) static STOP: AtomicBool = AtomicBool::new(false);

/// The terminal settings to put back, also from the panic hook.
pub(super) static SAVED: Mutex<Option<libc::termios>> = Mutex::new(None);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// The alternate screen, stdin in non-canonical mode without echo, and signal handlers; all
/// undone on drop (and by the panic hook, before the panic message is printed).
pub(super) struct Screen {
    /// Whether stdin is a terminal we read keys from (it may be redirected).
    pub(super) keys: bool,
}

pub(super) const ENTER: &str = "\x1b[?1049h\x1b[?25l";
pub(super) const LEAVE: &str = "\x1b[?25h\x1b[?1049l";

impl Screen {
    pub(super) fn enter() -> Result<Self> {
        let stdin = io::stdin();
        let keys = stdin.is_terminal();
        // No SA_RESTART: the signal interrupts poll(2), so the loop sees STOP at once.
        let action = SigAction::new(
            SigHandler::Handler(on_signal),
            SaFlags::empty(),
            SigSet::empty(),
        );
        for signal in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
            // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
            unsafe { sigaction(signal, &action) }
                .with_context(|| format!("cannot handle {signal}"))?;
        }
        if keys {
            let saved = termios::tcgetattr(stdin.as_fd()).context("cannot read the terminal")?;
            *SAVED.lock().unwrap_or_else(|e| e.into_inner()) = Some(saved.clone().into());
            let mut raw: Termios = saved;
            // ISIG stays on: Ctrl-C still sends SIGINT, handled above.
            raw.local_flags
                .remove(LocalFlags::ICANON | LocalFlags::ECHO);
            raw.control_chars[SpecialCharacterIndices::VMIN as usize] = 1;
            raw.control_chars[SpecialCharacterIndices::VTIME as usize] = 0;
            termios::tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &raw)
                .context("cannot set the terminal")?;
        }
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
        print!("{ENTER}");
        io::stdout().flush()?;
        Ok(Self { keys })
    }

    /// Replaces the screen's content with `text`.
    pub(super) fn draw(&mut self, out: &mut impl Write, text: &str) -> io::Result<()> {
        let mut frame = String::from("\x1b[H");
        for line in text.lines() {
            frame.push_str(line);
            frame.push_str("\x1b[K\n");
        }
        frame.push_str("\x1b[J");
        out.write_all(frame.as_bytes())?;
        out.flush()
    }

    /// Waits until `deadline`; true if the user asked to quit (`q`, Ctrl-C, a signal).
    pub(super) fn wait_for_quit(&mut self, deadline: Instant) -> Result<bool> {
        loop {
            if STOP.load(Ordering::SeqCst) {
                return Ok(true);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            let timeout =
                PollTimeout::try_from(left.as_millis().max(1)).unwrap_or(PollTimeout::MAX);
            let stdin = io::stdin();
            let mut fds = [PollFd::new(stdin.as_fd(), PollFlags::POLLIN)];
            let ready = match poll(if self.keys { &mut fds[..] } else { &mut [] }, timeout) {
                Ok(n) => n > 0,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(e).context("cannot wait for keys"),
            };
            if ready {
                let mut buf = [0u8; 64];
                match stdin.lock().read(&mut buf) {
                    // End of input: stop reading keys, keep refreshing.
                    Ok(0) => self.keys = false,
                    Ok(n) => {
                        if buf[..n].iter().any(|b| matches!(b, b'q' | b'Q' | 3)) {
                            return Ok(true);
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e).context("cannot read keys"),
                }
            }
        }
    }
}

/// Puts the terminal back: its settings, the main screen, the cursor.
pub(super) fn restore() {
    if let Some(saved) = SAVED.lock().unwrap_or_else(|e| e.into_inner()).take() {
        let _ = termios::tcsetattr(io::stdin().as_fd(), SetArg::TCSANOW, &Termios::from(saved));
    }
    // Not through the locked `io::stdout()`: the panic hook may run while it is held.
    // SAFETY: writing a constant buffer to fd 1.
    unsafe {
        libc::write(1, LEAVE.as_ptr().cast(), LEAVE.len());
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        restore();
    }
}
