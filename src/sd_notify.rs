//! The service manager's notification protocol (sd_notify(3)), which is small enough to speak
//! without libsystemd: one datagram of `KEY=value` lines to the unix socket named by
//! `$NOTIFY_SOCKET`, a filesystem path or, with a leading `@`, a name in the abstract namespace.
//!
//! `dxdp watch` says `READY=1` once it runs its loop, `STATUS=…` when what it does changes,
//! `STOPPING=1` on SIGTERM/SIGINT, and `WATCHDOG=1` from its event loop when the unit asks for a
//! watchdog (`$WATCHDOG_USEC`, for us when `$WATCHDOG_PID` is unset or our pid).
//!
//! Without `$NOTIFY_SOCKET` (not started by systemd, or not `Type=notify`) every call does
//! nothing. Sending never blocks and never fails the caller: a notification that cannot be sent
//! is logged at debug level, as libsystemd's callers usually ignore its errors.
use std::{
    ffi::OsStr,
    os::{
        linux::net::SocketAddrExt,
        unix::{
            ffi::OsStrExt,
            net::{SocketAddr, UnixDatagram},
        },
    },
    time::Duration,
};

use tracing::{debug, warn};

/// Where notifications go, if anywhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// A socket file, e.g. `/run/systemd/notify`.
    Path(std::path::PathBuf),
    /// A name in the abstract namespace (`@name` in the variable, without the `@` here).
    Abstract(Vec<u8>),
}

/// Reads `$NOTIFY_SOCKET`. `None` when unset or empty; an address of a kind dxdp does not speak
/// (systemd also allows `vsock:`) is an error the caller logs.
pub(crate) fn parse_socket(value: Option<&OsStr>) -> Result<Option<Target>, String> {
    let Some(value) = value.filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let bytes = value.as_bytes();
    match bytes[0] {
        b'/' => Ok(Some(Target::Path(value.into()))),
        b'@' if bytes.len() > 1 => Ok(Some(Target::Abstract(bytes[1..].to_vec()))),
        _ => Err(format!(
            "NOTIFY_SOCKET={} is neither an absolute path nor @abstract; not notifying",
            value.to_string_lossy()
        )),
    }
}

/// How often to send `WATCHDOG=1`: half of `$WATCHDOG_USEC`, as sd_watchdog_enabled(3)
/// recommends, if it is set to a positive number and `$WATCHDOG_PID` is unset or `pid`.
pub(crate) fn watchdog_interval(
    usec: Option<&str>,
    watchdog_pid: Option<&str>,
    pid: u32,
) -> Option<Duration> {
    let usec: u64 = usec?.trim().parse().ok().filter(|&u| u > 0)?;
    if let Some(for_pid) = watchdog_pid
        && for_pid.trim().parse::<u32>().ok()? != pid
    {
        return None;
    }
    Some(Duration::from_micros(usec / 2).max(Duration::from_millis(1)))
}

/// One notification: `KEY=value` lines. A `STATUS=` text is kept on one line, since a newline
/// would start another assignment.
pub(crate) fn message(fields: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (key, value) in fields {
        out.push_str(key);
        out.push('=');
        out.extend(value.chars().map(|c| if c == '\n' { ' ' } else { c }));
        out.push('\n');
    }
    out
}

/// A connection to the service manager, or nothing.
pub struct Notifier {
    socket: Option<(UnixDatagram, SocketAddr)>,
    watchdog: Option<Duration>,
    last_status: String,
}

impl Notifier {
    /// From `$NOTIFY_SOCKET`, `$WATCHDOG_USEC` and `$WATCHDOG_PID`. The variables stay set:
    /// children of the watch (nft, iptables-save) inherit them, and with `NotifyAccess=main`
    /// systemd ignores anything but the main process.
    pub fn from_env() -> Self {
        let target = match parse_socket(std::env::var_os("NOTIFY_SOCKET").as_deref()) {
            Ok(target) => target,
            Err(err) => {
                warn!("{err}");
                None
            }
        };
        let socket = target.and_then(|target| match connect(&target) {
            Ok(socket) => Some(socket),
            Err(err) => {
                warn!("cannot notify the service manager at {target:?}: {err}");
                None
            }
        });
        let watchdog = socket.as_ref().and_then(|_| {
            watchdog_interval(
                std::env::var("WATCHDOG_USEC").ok().as_deref(),
                std::env::var("WATCHDOG_PID").ok().as_deref(),
                std::process::id(),
            )
        });
        if let Some(every) = watchdog {
            debug!(
                every_ms = every.as_millis() as u64,
                "watchdog pings enabled"
            );
        }
        Self {
            socket,
            watchdog,
            last_status: String::new(),
        }
    }

    /// A notifier that sends nothing.
    pub fn disabled() -> Self {
        Self {
            socket: None,
            watchdog: None,
            last_status: String::new(),
        }
    }

    /// How often the caller must call [`Notifier::watchdog`], if at all.
    pub fn watchdog_interval(&self) -> Option<Duration> {
        self.watchdog
    }

    /// `READY=1` with a status line.
    pub fn ready(&mut self, status: &str) {
        self.last_status = status.to_owned();
        self.send(&message(&[("READY", "1"), ("STATUS", status)]));
    }

    /// `STATUS=…`, unless it is the status sent last.
    pub fn status(&mut self, status: &str) {
        if self.last_status != status {
            self.last_status = status.to_owned();
            self.send(&message(&[("STATUS", status)]));
        }
    }

    /// `STOPPING=1` with a status line.
    pub fn stopping(&mut self, status: &str) {
        self.last_status = status.to_owned();
        self.send(&message(&[("STOPPING", "1"), ("STATUS", status)]));
    }

    /// `WATCHDOG=1`, if the unit asked for a watchdog.
    pub fn watchdog(&self) {
        if self.watchdog.is_some() {
            self.send(&message(&[("WATCHDOG", "1")]));
        }
    }

    fn send(&self, text: &str) {
        let Some((socket, addr)) = &self.socket else {
            return;
        };
        if let Err(err) = socket.send_to_addr(text.as_bytes(), addr) {
            debug!("cannot notify the service manager: {err}");
        }
    }
}

fn connect(target: &Target) -> std::io::Result<(UnixDatagram, SocketAddr)> {
    let addr = match target {
        Target::Path(path) => SocketAddr::from_pathname(path)?,
        Target::Abstract(name) => SocketAddr::from_abstract_name(name)?,
    };
    let socket = UnixDatagram::unbound()?;
    // A service manager that does not read its socket must not stall the watch's loop.
    socket.set_nonblocking(true)?;
    Ok((socket, addr))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A case name, the variable(s) as given, what comes out.
    type Case<In, Out> = (&'static str, In, Out);
    type SocketCase = Case<Option<&'static str>, Result<Option<Target>, ()>>;
    type WatchdogCase = Case<(Option<&'static str>, Option<&'static str>), Option<Duration>>;

    #[test]
    fn notify_socket_forms() {
        let cases: &[SocketCase] = &[
            ("unset", None, Ok(None)),
            ("empty", Some(""), Ok(None)),
            (
                "path",
                Some("/run/systemd/notify"),
                Ok(Some(Target::Path("/run/systemd/notify".into()))),
            ),
            (
                "abstract",
                Some("@/org/systemd/notify/42"),
                Ok(Some(Target::Abstract(b"/org/systemd/notify/42".to_vec()))),
            ),
            ("bare @", Some("@"), Err(())),
            ("relative", Some("run/notify"), Err(())),
            ("vsock", Some("vsock:2:1234"), Err(())),
        ];
        for (name, value, want) in cases {
            let got = parse_socket(value.map(OsStr::new)).map_err(|_| ());
            assert_eq!(&got, want, "case {name}");
        }
    }

    #[test]
    fn watchdog_interval_is_half_for_us_only() {
        let secs = Duration::from_secs;
        let cases: &[WatchdogCase] = &[
            ("unset", (None, None), None),
            ("60 s", (Some("60000000"), None), Some(secs(30))),
            ("our pid", (Some("2000000"), Some("4242")), Some(secs(1))),
            ("another pid", (Some("2000000"), Some("1")), None),
            ("bad pid", (Some("2000000"), Some("x")), None),
            ("zero", (Some("0"), None), None),
            ("garbage", (Some("1s"), None), None),
            ("negative", (Some("-5"), None), None),
            ("1 us", (Some("1"), None), Some(Duration::from_millis(1))),
        ];
        for (name, (usec, pid), want) in cases {
            assert_eq!(watchdog_interval(*usec, *pid, 4242), *want, "case {name}");
        }
    }

    #[test]
    fn messages_are_key_value_lines() {
        assert_eq!(
            message(&[("READY", "1"), ("STATUS", "2 links\non bridge")]),
            "READY=1\nSTATUS=2 links on bridge\n"
        );
        assert_eq!(message(&[("WATCHDOG", "1")]), "WATCHDOG=1\n");
    }

    /// A real datagram socket in the abstract namespace, as systemd ≥ 254 may hand out.
    #[test]
    fn sends_to_an_abstract_socket() {
        let name = format!("dxdp-sd-notify-test-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let server = UnixDatagram::bind_addr(&addr).unwrap();
        server
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let target = parse_socket(Some(OsStr::new(&format!("@{name}"))))
            .unwrap()
            .unwrap();
        let mut notifier = Notifier {
            socket: Some(connect(&target).unwrap()),
            watchdog: Some(Duration::from_secs(1)),
            last_status: String::new(),
        };
        notifier.ready("1 link");
        notifier.status("1 link");
        notifier.watchdog();
        notifier.stopping("bye");
        let mut got = Vec::new();
        let mut buf = [0u8; 512];
        for _ in 0..3 {
            let n = server.recv(&mut buf).unwrap();
            got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        // The unchanged status was not sent again.
        assert_eq!(
            got,
            [
                "READY=1\nSTATUS=1 link\n",
                "WATCHDOG=1\n",
                "STOPPING=1\nSTATUS=bye\n"
            ]
        );
    }
}
