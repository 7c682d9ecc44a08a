//! Which frames are the measured flow's, and the count of what the application read.

/// The frames the application counts as the measured flow's: this length, starting with these
/// bytes (the bench sends one frame over and over, so its headers are all alike).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expected {
    pub len: usize,
    pub start: Vec<u8>,
}

impl Expected {
    /// Frames like `frame`, compared on its first `header` bytes.
    pub fn like(frame: &[u8], header: usize) -> Self {
        Self {
            len: frame.len(),
            start: frame[..header.min(frame.len())].to_vec(),
        }
    }

    pub fn matches(&self, frame: &[u8]) -> bool {
        frame.len() == self.len && frame.starts_with(&self.start)
    }
}

/// What the application read: the flow's frames and bytes, and any other frame that reached
/// the socket (B's own traffic, say an ARP answer).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub frames: u64,
    pub bytes: u64,
    pub other: u64,
}

impl Tally {
    pub(super) fn count(&mut self, expected: &Expected, frame: Option<&[u8]>) {
        match frame {
            Some(f) if expected.matches(f) => {
                self.frames += 1;
                self.bytes += f.len() as u64;
            }
            _ => self.other += 1,
        }
    }
}
