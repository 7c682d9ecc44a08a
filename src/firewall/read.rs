//! Reading the host's rules: the iptables tools of both backends, `nft`, and the
//! br_netfilter switches.
use std::{collections::HashSet, io::ErrorKind, path::Path, process::Command};

use anyhow::{Context, Result, bail};

use super::{
    Ruleset, iptables,
    model::{Family, Table},
    nft,
};

/// Runs `tool args`; `Ok(None)` if it is not installed.
fn output(tool: &str, args: &[&str]) -> Result<Option<String>> {
    let out = match Command::new(tool).args(args).output() {
        Ok(out) => out,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot run {tool}")),
    };
    if !out.status.success() {
        bail!(
            "{tool} {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    String::from_utf8(out.stdout)
        .map(Some)
        .with_context(|| format!("{tool} printed something that is not UTF-8"))
}

/// Whether a kernel table list under /proc/net names any table (the legacy x_tables
/// backend is in use).
fn legacy_in_use(proc_file: &str) -> bool {
    std::fs::read_to_string(proc_file).is_ok_and(|names| !names.trim().is_empty())
}

/// Whether legacy iptables or ip6tables tables are loaded: their changes move no nf_tables
/// generation.
pub(super) fn legacy_tables_loaded() -> bool {
    legacy_in_use("/proc/net/ip_tables_names") || legacy_in_use("/proc/net/ip6_tables_names")
}

pub(super) fn ruleset() -> Result<Ruleset> {
    let mut tables = Vec::new();
    // iptables-nft's tables, read here as iptables rules; nft's reader skips them.
    let mut iptables_nft = HashSet::new();
    for (family, nft_family, proc_file, legacy, nft_save) in [
        (
            Family::V4,
            "ip",
            "/proc/net/ip_tables_names",
            "iptables-legacy-save",
            "iptables-nft-save",
        ),
        (
            Family::V6,
            "ip6",
            "/proc/net/ip6_tables_names",
            "ip6tables-legacy-save",
            "ip6tables-nft-save",
        ),
    ] {
        let tool = nft_save.trim_end_matches("-nft-save");
        if legacy_in_use(proc_file) {
            let Some(dump) = output(legacy, &[])? else {
                bail!(
                    "legacy {tool} rules are loaded ({proc_file}) but {legacy} is not installed \
                     to read them; install it (apt-get install iptables)"
                );
            };
            tables.extend(
                iptables::parse(&format!("{tool} (legacy)"), family, &dump)
                    .map_err(anyhow::Error::msg)?,
            );
        }
        if let Some(dump) = output(nft_save, &[])? {
            let parsed = iptables::parse(tool, family, &dump).map_err(anyhow::Error::msg)?;
            for table in &parsed {
                let name = table.name.rsplit(' ').next().unwrap_or_default();
                iptables_nft.insert((nft_family.to_owned(), name.to_owned()));
            }
            tables.extend(parsed);
        }
    }
    tables.extend(nft_tables(&iptables_nft)?);
    Ok(Ruleset {
        tables,
        bridge_nf: bridge_nf(),
        bridge_switches,
    })
}

fn nft_tables(skip: &HashSet<(String, String)>) -> Result<Vec<Table>> {
    // Whether nf_tables holds a ruleset cannot be told without asking it (it is often built
    // in, with no trace under /sys/module), so `nft` is required.
    let (Some(json), Some(listing)) = (
        output("nft", &["-j", "list", "ruleset"])?,
        output("nft", &["-a", "list", "ruleset"])?,
    ) else {
        bail!(
            "`nft` is not installed, so dxdp cannot read the nftables ruleset to tell whether a \
             rule keeps containers apart; install it (apt-get install nftables)"
        );
    };
    nft::parse(
        &json,
        |family, table| skip.contains(&(family.to_owned(), table.to_owned())),
        &nft::Listing::parse(&listing),
    )
    .map_err(anyhow::Error::msg)
}

fn switch(path: &str) -> bool {
    std::fs::read_to_string(path).is_ok_and(|v| v.trim() == "1")
}

pub(super) fn bridge_nf() -> Option<(bool, bool)> {
    let dir = "/proc/sys/net/bridge";
    Path::new(dir).exists().then(|| {
        (
            switch(&format!("{dir}/bridge-nf-call-iptables")),
            switch(&format!("{dir}/bridge-nf-call-ip6tables")),
        )
    })
}

fn bridge_switches(bridge: &str) -> (bool, bool) {
    let dir = format!("/sys/class/net/{bridge}/bridge");
    (
        switch(&format!("{dir}/nf_call_iptables")),
        switch(&format!("{dir}/nf_call_ip6tables")),
    )
}
