//! The text view of a sample: a header line and up to four tables (links, veths, exposed ports,
//! egress containers) aligned with tabwriter.
use std::{
    io::{self, Write},
    path::Path,
    time::{SystemTime, UNIX_EPOCH},
};

use tabwriter::{Alignment, TabWriter};

use super::sample::*;

/// The header line and both tables, columns aligned whatever the names' lengths.
pub(super) fn render(sample: &Sample, pin_dir: &Path, out: &mut impl Write) -> io::Result<()> {
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
    // Exposed ports and egress containers are counted only where there are some: most hosts
    // have none.
    let ports = match sample.ports.len() {
        0 => String::new(),
        n => format!(", {n} exposed ports"),
    };
    let egress = match sample.egress.len() {
        0 => String::new(),
        n => format!(", {n} egress"),
    };
    writeln!(
        out,
        "dxdp top  {time}  every {}  {} links, {} veths{ports}{egress}  redirected {}bit/s {} pkt/s  \
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
    if !sample.ports.is_empty() {
        writeln!(out)?;
        let mut table = TabWriter::new(&mut *out).padding(2);
        writeln!(
            table,
            "CONTAINER\tPORT\tNIC\tTO\tIN BIT/S\tIN PKT/S\tOUT BIT/S\tOUT PKT/S\tPASSED/S"
        )?;
        for p in &sample.ports {
            writeln!(
                table,
                "{}\t{}/{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
                p.container,
                p.host,
                p.protocol,
                p.nic.as_deref().unwrap_or("-"),
                p.to,
                si(p.inbound.bits_per_sec),
                si(p.inbound.packets_per_sec),
                si(p.outbound.bits_per_sec),
                si(p.outbound.packets_per_sec),
                si(p.passed_packets_per_sec),
            )?;
        }
        table.flush()?;
    }
    if !sample.egress.is_empty() {
        writeln!(out)?;
        let mut table = TabWriter::new(&mut *out).padding(2);
        writeln!(
            table,
            "EGRESS\tADDRESS\tNIC\tOUT BIT/S\tOUT PKT/S\tBACK BIT/S\tBACK PKT/S\tPASSED/S"
        )?;
        for e in &sample.egress {
            writeln!(
                table,
                "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
                e.container,
                e.address,
                e.nic.as_deref().unwrap_or("-"),
                si(e.outbound.bits_per_sec),
                si(e.outbound.packets_per_sec),
                si(e.back.bits_per_sec),
                si(e.back.packets_per_sec),
                si(e.passed_packets_per_sec),
            )?;
        }
        table.flush()?;
    }
    Ok(())
}

/// A rate with an SI prefix: `0`, `950`, `12.3k`, `9.41G`.
pub(super) fn si(v: f64) -> String {
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
pub(super) fn seconds(secs: f64) -> String {
    let rounded = (secs * 100.0).round() / 100.0;
    format!("{rounded}s")
}

/// A wall-clock time as RFC 3339 UTC (`2026-12-03T13:50:01.123Z`) and as shown in the header.
pub(super) fn clock(t: SystemTime) -> (String, String) {
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
