//! What the MTU means for a linked pair. Bulk TCP between containers is bound by the MTU more
//! than by the bridge (issue 21): at MTU 65520 the bridge alone carries about as much as a tc
//! link does, so `bench` and `doctor` say which MTU a pair or network has and how to raise it.

/// The MTU of an interface of the calling thread's namespace (the host's, or an overlay
/// sandbox's).
pub(super) fn of(ifname: &str) -> Option<u32> {
    crate::netlink::mtu_here(ifname)
}

/// One clause on an MTU: for the default 1500, what a larger one would change and how to get
/// it; for a larger one, only the figure.
pub(super) fn advice(mtu: u32) -> String {
    if mtu > 1500 {
        return format!("MTU {mtu}");
    }
    format!(
        "MTU {mtu}: bulk TCP between containers is bound by the MTU more than by the bridge (one \
         stream on this project's test machine: about 17 Gbit/s over the bridge at 1500, 26-31 \
         at 65520, where a tc link adds nothing; docs/performance.md); a network created with \
         -o com.docker.network.driver.mtu=N gives its containers a larger one"
    )
}

#[cfg(test)]
mod tests {
    use super::advice;

    #[test]
    fn a_default_mtu_gets_the_way_to_raise_it_and_a_large_one_only_its_figure() {
        let default = advice(1500);
        assert!(default.starts_with("MTU 1500: "), "{default}");
        assert!(
            default.contains("com.docker.network.driver.mtu"),
            "{default}"
        );
        assert_eq!(advice(65520), "MTU 65520");
    }
}
