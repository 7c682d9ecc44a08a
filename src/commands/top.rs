//! `dxdp top`: live rates of every link and managed veth, computed from two successive reads of
//! the pinned counters (no watch needed).
//!
//! On a terminal the view is redrawn in place (ANSI home and clear, no TUI crate) with the
//! terminal's stdin in non-canonical mode, so a single `q` quits; the terminal is restored on
//! every exit path: `q`, Ctrl-C, SIGTERM, SIGHUP, an error, a panic. Otherwise (stdout not a
//! terminal, or `--once`, `--count`, `--json`) samples are printed one after another.
use std::{
    collections::HashMap,
    io::{self, IsTerminal, Read, Write},
    os::fd::AsFd,
    path::Path,
    process::ExitCode,
    sync::{
        Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context, Result};
use nix::{
    poll::{PollFd, PollFlags, PollTimeout, poll},
    sys::{
        signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction},
        termios::{self, LocalFlags, SetArg, SpecialCharacterIndices, Termios},
    },
};
use serde::Serialize;
use tabwriter::{Alignment, TabWriter};

use crate::{
    cli::TopArgs,
    datapath::{Capacity, Datapath, InterfaceCounters, Kind, LinkRecord},
    netlink,
    netns::NetnsPath,
};

/// The `schema` field of every JSON sample; bumped when the shape changes incompatibly.
const SCHEMA: &str = "dxdp.top/1";

/// One read of the pinned state: cumulative counters, with the veths' current names.
#[derive(Clone, Debug, Default)]
struct Snapshot {
    links: Vec<LinkSnap>,
    interfaces: Vec<InterfaceSnap>,
}

#[derive(Clone, Debug)]
struct LinkSnap {
    record: LinkRecord,
    low_ifname: Option<String>,
    high_ifname: Option<String>,
}

#[derive(Clone, Debug)]
struct InterfaceSnap {
    ifindex: u32,
    ifname: Option<String>,
    datapath: Kind,
    counters: InterfaceCounters,
}

/// One sample: the rates between two snapshots. Serialized as the documented `dxdp.top/1` line.
#[derive(Debug, Serialize)]
struct Sample {
    schema: &'static str,
    /// RFC 3339, UTC, of the second read.
    time: String,
    /// Seconds actually elapsed between the two reads the rates come from.
    interval_secs: f64,
    links: Vec<LinkRate>,
    interfaces: Vec<InterfaceRate>,
}

/// A link's rates; `a` and `b` are its low and high endpoints, as `dxdp status` orders them.
#[derive(Debug, Serialize, PartialEq)]
struct LinkRate {
    a: String,
    b: String,
    /// Host-side veth names; `null` where the veth is gone.
    a_veth: Option<String>,
    b_veth: Option<String>,
    network: String,
    datapath: Kind,
    a_to_b: Rate,
    b_to_a: Rate,
}

#[derive(Debug, Default, Serialize, PartialEq, Clone, Copy)]
struct Rate {
    packets_per_sec: f64,
    bits_per_sec: f64,
}

#[derive(Debug, Serialize, PartialEq)]
struct InterfaceRate {
    ifname: Option<String>,
    ifindex: u32,
    datapath: Kind,
    redirected_packets_per_sec: f64,
    passed_packets_per_sec: f64,
    fallback_packets_per_sec: f64,
    spoofed_packets_per_sec: f64,
}

impl LinkRate {
    fn bits_per_sec(&self) -> f64 {
        self.a_to_b.bits_per_sec + self.b_to_a.bits_per_sec
    }
    fn packets_per_sec(&self) -> f64 {
        self.a_to_b.packets_per_sec + self.b_to_a.packets_per_sec
    }
}

impl InterfaceRate {
    fn packets_per_sec(&self) -> f64 {
        self.redirected_packets_per_sec
            + self.passed_packets_per_sec
            + self.fallback_packets_per_sec
            + self.spoofed_packets_per_sec
    }
}

/// Growth of a counter per second. Nothing to compare with (a link or veth that appeared between
/// the reads), a counter that went backwards (state recreated under the same key) or no elapsed
/// time give 0, never a negative or infinite rate.
fn per_sec(now: u64, then: Option<u64>, secs: f64) -> f64 {
    match then {
        Some(then) if now >= then && secs > 0.0 => (now - then) as f64 / secs,
        _ => 0.0,
    }
}

/// The rates between two snapshots taken `elapsed` apart, busiest first. Pure: unit-tested.
/// Links and veths that vanished between the reads are not shown; new ones show 0.
fn rates(
    prev: &Snapshot,
    cur: &Snapshot,
    elapsed: Duration,
) -> (Vec<LinkRate>, Vec<InterfaceRate>) {
    let secs = elapsed.as_secs_f64();
    // A link recreated between the reads has new counters: its creation time tells them apart.
    let key = |r: &LinkRecord| (r.low_ifindex, r.high_ifindex, r.created_unix_secs);
    let before: HashMap<_, &LinkRecord> = prev
        .links
        .iter()
        .map(|l| (key(&l.record), &l.record))
        .collect();
    let mut links: Vec<LinkRate> = cur
        .links
        .iter()
        .map(|l| {
            let r = &l.record;
            let old = before.get(&key(r));
            let rate =
                |now: &crate::datapath::Traffic, then: Option<crate::datapath::Traffic>| Rate {
                    packets_per_sec: per_sec(now.packets, then.map(|t| t.packets), secs),
                    bits_per_sec: 8.0 * per_sec(now.bytes, then.map(|t| t.bytes), secs),
                };
            LinkRate {
                a: r.low_name.clone(),
                b: r.high_name.clone(),
                a_veth: l.low_ifname.clone(),
                b_veth: l.high_ifname.clone(),
                network: r.network.clone(),
                datapath: r.datapath,
                a_to_b: rate(&r.low_to_high, old.map(|o| o.low_to_high)),
                b_to_a: rate(&r.high_to_low, old.map(|o| o.high_to_low)),
            }
        })
        .collect();
    links.sort_by(|x, y| {
        y.bits_per_sec()
            .total_cmp(&x.bits_per_sec())
            .then(y.packets_per_sec().total_cmp(&x.packets_per_sec()))
            .then_with(|| (&x.a, &x.b).cmp(&(&y.a, &y.b)))
    });

    let before: HashMap<u32, &InterfaceCounters> = prev
        .interfaces
        .iter()
        .map(|i| (i.ifindex, &i.counters))
        .collect();
    let mut interfaces: Vec<InterfaceRate> = cur
        .interfaces
        .iter()
        .map(|i| {
            let old = before.get(&i.ifindex);
            let c = &i.counters;
            let rate =
                |pick: fn(&InterfaceCounters) -> u64| per_sec(pick(c), old.map(|o| pick(o)), secs);
            InterfaceRate {
                ifname: i.ifname.clone(),
                ifindex: i.ifindex,
                datapath: i.datapath,
                redirected_packets_per_sec: rate(|c| c.redirected_packets),
                passed_packets_per_sec: rate(|c| c.passed_packets),
                fallback_packets_per_sec: rate(|c| c.fallback_packets),
                spoofed_packets_per_sec: rate(|c| c.spoofed_packets),
            }
        })
        .collect();
    interfaces.sort_by(|x, y| {
        y.packets_per_sec()
            .total_cmp(&x.packets_per_sec())
            .then(x.ifindex.cmp(&y.ifindex))
    });
    (links, interfaces)
}

/// Reads the pinned state; a missing pin directory is an empty state, as in `dxdp status`. The
/// datapath is opened (and its lock taken) per read only, so links can change meanwhile.
fn read(pin_dir: &Path, capacity: Capacity) -> Result<Snapshot> {
    if !pin_dir.exists() {
        return Ok(Snapshot::default());
    }
    let mut datapath = Datapath::open(pin_dir, capacity)?;
    let veths: HashMap<u32, String> = netlink::interfaces(&NetnsPath::host())?
        .into_iter()
        .filter(|i| i.is_veth())
        .map(|i| (i.index, i.name))
        .collect();
    let mut snap = Snapshot::default();
    for (ifindex, datapath_kind) in datapath.interfaces()? {
        snap.interfaces.push(InterfaceSnap {
            ifindex,
            ifname: veths.get(&ifindex).cloned(),
            datapath: datapath_kind,
            counters: datapath.counters(ifindex)?.unwrap_or_default(),
        });
    }
    for record in datapath.links()? {
        snap.links.push(LinkSnap {
            low_ifname: veths.get(&record.low_ifindex).cloned(),
            high_ifname: veths.get(&record.high_ifindex).cloned(),
            record,
        });
    }
    Ok(snap)
}

pub fn run(pin_dir: &Path, capacity: Capacity, args: TopArgs) -> Result<ExitCode> {
    let interval = Duration::from_secs_f64(args.interval);
    let limit = if args.once { Some(1) } else { args.count };
    let interactive =
        !args.json && !args.once && args.count.is_none() && io::stdout().is_terminal();
    let mut screen = if interactive {
        Some(Screen::enter()?)
    } else {
        None
    };
    let mut out = io::stdout().lock();
    let mut prev = read(pin_dir, capacity)?;
    let mut prev_at = Instant::now();
    if let Some(screen) = &mut screen {
        screen.draw(
            &mut out,
            &format!(
                "dxdp top  {}  every {}\n\nreading the counters…",
                clock(SystemTime::now()).1,
                seconds(args.interval)
            ),
        )?;
    }
    let mut printed = 0u64;
    loop {
        let deadline = prev_at + interval;
        if let Some(screen) = &mut screen {
            if screen.wait_for_quit(deadline)? {
                break;
            }
        } else {
            std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
        }
        let cur = read(pin_dir, capacity)?;
        let at = Instant::now();
        let elapsed = at - prev_at;
        let (links, interfaces) = rates(&prev, &cur, elapsed);
        let sample = Sample {
            schema: SCHEMA,
            time: clock(SystemTime::now()).0,
            interval_secs: elapsed.as_secs_f64(),
            links,
            interfaces,
        };
        if args.json {
            serde_json::to_writer(&mut out, &sample)?;
            writeln!(out)?;
        } else {
            let mut text = Vec::new();
            render(&sample, pin_dir, &mut text)?;
            let text = String::from_utf8_lossy(&text);
            match &mut screen {
                Some(screen) => screen.draw(&mut out, &format!("{text}\nq or Ctrl-C quits"))?,
                None => {
                    if printed > 0 {
                        writeln!(out)?;
                    }
                    out.write_all(text.as_bytes())?;
                }
            }
        }
        out.flush()?;
        printed += 1;
        if limit.is_some_and(|n| printed >= n) {
            break;
        }
        prev = cur;
        prev_at = at;
    }
    drop(out);
    drop(screen);
    Ok(ExitCode::SUCCESS)
}

/// The header line and both tables, columns aligned whatever the names' lengths.
fn render(sample: &Sample, pin_dir: &Path, out: &mut impl Write) -> io::Result<()> {
    let total_bits: f64 = sample.links.iter().map(LinkRate::bits_per_sec).sum();
    let total_packets: f64 = sample.links.iter().map(LinkRate::packets_per_sec).sum();
    let fallback: f64 = sample
        .interfaces
        .iter()
        .map(|i| i.fallback_packets_per_sec)
        .sum();
    let spoofed: f64 = sample
        .interfaces
        .iter()
        .map(|i| i.spoofed_packets_per_sec)
        .sum();
    // Seconds are enough on screen: `2026-12-03 13:50:01 UTC`.
    let time = format!(
        "{} UTC",
        sample
            .time
            .get(..19)
            .unwrap_or(&sample.time)
            .replace('T', " ")
    );
    writeln!(
        out,
        "dxdp top  {time}  every {}  {} links, {} veths  redirected {}bit/s {} pkt/s  \
         fallback {}/s  spoofed {}/s",
        seconds(sample.interval_secs),
        sample.links.len(),
        sample.interfaces.len(),
        si(total_bits),
        si(total_packets),
        si(fallback),
        si(spoofed),
    )?;
    writeln!(out)?;
    if sample.links.is_empty() {
        writeln!(out, "no links (pin directory {})", pin_dir.display())?;
    } else {
        let name = |n: &Option<String>| n.clone().unwrap_or_else(|| "-".to_owned());
        let mut table = TabWriter::new(&mut *out).padding(2);
        writeln!(
            table,
            "A\tVETH A\tB\tVETH B\tNETWORK\tPATH\tA->B BIT/S\tA->B PKT/S\tB->A BIT/S\tB->A PKT/S"
        )?;
        for l in &sample.links {
            writeln!(
                table,
                "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
                l.a,
                name(&l.a_veth),
                l.b,
                name(&l.b_veth),
                l.network,
                l.datapath,
                si(l.a_to_b.bits_per_sec),
                si(l.a_to_b.packets_per_sec),
                si(l.b_to_a.bits_per_sec),
                si(l.b_to_a.packets_per_sec),
            )?;
        }
        table.flush()?;
    }
    if !sample.interfaces.is_empty() {
        writeln!(out)?;
        let mut table = TabWriter::new(&mut *out)
            .padding(2)
            .alignment(Alignment::Right);
        writeln!(
            table,
            "VETH\tIFINDEX\tPATH\tREDIRECTED/S\tPASSED/S\tFALLBACK/S\tSPOOFED/S\t"
        )?;
        for i in &sample.interfaces {
            writeln!(
                table,
                "{}\t{}\t{}\t{}\t{}\t{}\t{}\t",
                i.ifname.as_deref().unwrap_or("-"),
                i.ifindex,
                i.datapath,
                si(i.redirected_packets_per_sec),
                si(i.passed_packets_per_sec),
                si(i.fallback_packets_per_sec),
                si(i.spoofed_packets_per_sec),
            )?;
        }
        table.flush()?;
    }
    Ok(())
}

/// A rate with an SI prefix: `0`, `950`, `12.3k`, `9.41G`.
fn si(v: f64) -> String {
    // An empty sum of f64 is -0.0: shown as 0, as anything not above zero.
    if v.is_nan() || v <= 0.0 {
        return "0".to_owned();
    }
    if v < 999.5 {
        return format!("{v:.0}");
    }
    let mut v = v;
    for unit in ["k", "M", "G", "T", "P"] {
        v /= 1000.0;
        if v < 999.5 || unit == "P" {
            return if v < 9.995 {
                format!("{v:.2}{unit}")
            } else if v < 99.95 {
                format!("{v:.1}{unit}")
            } else {
                format!("{v:.0}{unit}")
            };
        }
    }
    unreachable!("the loop returns at P")
}

/// `1s`, `0.5s`.
fn seconds(secs: f64) -> String {
    let rounded = (secs * 100.0).round() / 100.0;
    format!("{rounded}s")
}

/// A wall-clock time as RFC 3339 UTC (`2026-12-03T13:50:01.123Z`) and as shown in the header.
fn clock(t: SystemTime) -> (String, String) {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (h, m, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    (
        format!(
            "{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{:03}Z",
            d.subsec_millis()
        ),
        format!("{year:04}-{month:02}-{day:02} {h:02}:{m:02}:{s:02} UTC"),
    )
}

// ---------------------------------------------------------------------------------------------
// The interactive screen

/// Set by SIGINT, SIGTERM and SIGHUP while the screen is up.
static STOP: AtomicBool = AtomicBool::new(false);

/// The terminal settings to put back, also from the panic hook.
static SAVED: Mutex<Option<libc::termios>> = Mutex::new(None);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// The alternate screen, stdin in non-canonical mode without echo, and signal handlers; all
/// undone on drop (and by the panic hook, before the panic message is printed).
struct Screen {
    /// Whether stdin is a terminal we read keys from (it may be redirected).
    keys: bool,
}

const ENTER: &str = "\x1b[?1049h\x1b[?25l";
const LEAVE: &str = "\x1b[?25h\x1b[?1049l";

impl Screen {
    fn enter() -> Result<Self> {
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
    fn draw(&mut self, out: &mut impl Write, text: &str) -> io::Result<()> {
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
    fn wait_for_quit(&mut self, deadline: Instant) -> Result<bool> {
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
fn restore() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datapath::{Origin, Traffic};

    fn link(low: u32, high: u32, l2h: (u64, u64), h2l: (u64, u64)) -> LinkSnap {
        LinkSnap {
            record: LinkRecord {
                low_ifindex: low,
                high_ifindex: high,
                low_name: format!("c{low}"),
                high_name: format!("c{high}"),
                network: "net".to_owned(),
                datapath: Kind::Tc,
                origin: Origin::Manual,
                created_unix_secs: 100,
                low_to_high: Traffic {
                    packets: l2h.0,
                    bytes: l2h.1,
                },
                high_to_low: Traffic {
                    packets: h2l.0,
                    bytes: h2l.1,
                },
            },
            low_ifname: Some(format!("veth{low}")),
            high_ifname: None,
        }
    }

    fn iface(ifindex: u32, redirected: u64, fallback: u64) -> InterfaceSnap {
        InterfaceSnap {
            ifindex,
            ifname: Some(format!("veth{ifindex}")),
            datapath: Kind::Xdp,
            counters: InterfaceCounters {
                redirected_packets: redirected,
                fallback_packets: fallback,
                ..Default::default()
            },
        }
    }

    #[test]
    fn rates_are_deltas_over_elapsed_time_busiest_first() {
        let prev = Snapshot {
            links: vec![link(1, 2, (10, 1000), (0, 0)), link(3, 4, (0, 0), (0, 0))],
            interfaces: vec![iface(1, 10, 0), iface(2, 0, 5)],
        };
        let cur = Snapshot {
            links: vec![
                link(1, 2, (110, 2000), (0, 0)),
                link(3, 4, (0, 0), (50, 500_000)),
            ],
            interfaces: vec![iface(1, 110, 0), iface(2, 0, 405)],
        };
        let (links, interfaces) = rates(&prev, &cur, Duration::from_millis(500));
        // 500,000 bytes in 0.5 s is 8 Mbit/s: the busiest link comes first.
        assert_eq!((links[0].a.as_str(), links[0].b.as_str()), ("c3", "c4"));
        assert_eq!(links[0].b_to_a.bits_per_sec, 8_000_000.0);
        assert_eq!(links[0].b_to_a.packets_per_sec, 100.0);
        assert_eq!(links[0].a_to_b, Rate::default());
        assert_eq!(links[1].a_to_b.packets_per_sec, 200.0);
        assert_eq!(links[1].a_to_b.bits_per_sec, 16_000.0);
        assert_eq!(links[1].a_veth.as_deref(), Some("veth1"));
        assert_eq!(links[1].b_veth, None);
        // veth 2's fallbacks (800/s) outrun veth 1's redirects (200/s).
        assert_eq!(interfaces[0].ifindex, 2);
        assert_eq!(interfaces[0].fallback_packets_per_sec, 800.0);
        assert_eq!(interfaces[1].redirected_packets_per_sec, 200.0);
    }

    #[test]
    fn resets_new_and_vanished_state_never_give_negative_rates() {
        let prev = Snapshot {
            links: vec![
                link(1, 2, (1000, 90_000), (5, 500)),
                link(5, 6, (1, 1), (1, 1)),
            ],
            interfaces: vec![iface(1, 1000, 7), iface(9, 3, 3)],
        };
        let mut recreated = link(7, 8, (40, 4000), (0, 0));
        recreated.record.created_unix_secs = 200;
        let mut relinked = link(1, 2, (3, 300), (0, 0));
        relinked.record.created_unix_secs = 100; // same key, counters went backwards
        let cur = Snapshot {
            // 1-2 reset, 5-6 vanished, 7-8 new.
            links: vec![relinked, recreated],
            interfaces: vec![iface(1, 2, 0), iface(3, 50, 50)],
        };
        let (links, interfaces) = rates(&prev, &cur, Duration::from_secs(1));
        assert_eq!(links.len(), 2);
        assert_eq!(interfaces.len(), 2);
        for l in &links {
            for r in [l.a_to_b, l.b_to_a] {
                assert_eq!(r, Rate::default(), "{l:?}");
            }
        }
        for i in &interfaces {
            assert_eq!(i.packets_per_sec(), 0.0, "{i:?}");
        }
        // No elapsed time: zero, not infinity or NaN.
        let (links, _) = rates(&cur, &cur, Duration::ZERO);
        assert!(links.iter().all(|l| l.bits_per_sec() == 0.0));
    }

    #[test]
    fn json_sample_has_the_documented_shape() {
        let prev = Snapshot {
            links: vec![link(1, 2, (0, 0), (0, 0))],
            interfaces: vec![iface(1, 0, 0)],
        };
        let cur = Snapshot {
            links: vec![link(1, 2, (1, 125), (0, 0))],
            interfaces: vec![iface(1, 1, 0)],
        };
        let (links, interfaces) = rates(&prev, &cur, Duration::from_secs(1));
        let sample = Sample {
            schema: SCHEMA,
            time: clock(UNIX_EPOCH + Duration::from_millis(1_764_769_801_250)).0,
            interval_secs: 1.0,
            links,
            interfaces,
        };
        let v = serde_json::to_value(&sample).expect("json");
        assert_eq!(v["schema"], "dxdp.top/1");
        assert_eq!(v["time"], "2025-12-03T13:50:01.250Z");
        assert_eq!(v["links"][0]["a"], "c1");
        assert_eq!(v["links"][0]["a_veth"], "veth1");
        assert_eq!(v["links"][0]["datapath"], "tc");
        assert_eq!(v["links"][0]["a_to_b"]["bits_per_sec"], 1000.0);
        assert_eq!(v["links"][0]["b_to_a"]["packets_per_sec"], 0.0);
        assert_eq!(v["interfaces"][0]["ifname"], "veth1");
        assert_eq!(v["interfaces"][0]["redirected_packets_per_sec"], 1.0);
        let mut text = Vec::new();
        render(&sample, Path::new("/sys/fs/bpf/dxdp"), &mut text).expect("render");
        let text = String::from_utf8(text).expect("utf-8");
        assert!(
            text.starts_with("dxdp top  2025-12-03 13:50:01 UTC  every 1s  1 links"),
            "{text}"
        );
    }

    #[test]
    fn empty_state_renders_no_links() {
        let sample = Sample {
            schema: SCHEMA,
            time: clock(UNIX_EPOCH).0,
            interval_secs: 1.0,
            links: vec![],
            interfaces: vec![],
        };
        let mut text = Vec::new();
        render(&sample, Path::new("/x"), &mut text).expect("render");
        let text = String::from_utf8(text).expect("utf-8");
        assert!(text.contains("no links (pin directory /x)"), "{text}");
        assert!(
            text.starts_with("dxdp top  1970-01-01 00:00:00 UTC"),
            "{text}"
        );
    }

    #[test]
    fn si_prefixes() {
        for (v, s) in [
            (0.0, "0"),
            (-0.0, "0"),
            (950.0, "950"),
            (1234.0, "1.23k"),
            (12_345.0, "12.3k"),
            (9.41e9, "9.41G"),
            (123e6, "123M"),
        ] {
            assert_eq!(si(v), s, "{v}");
        }
    }
}
