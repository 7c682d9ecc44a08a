//! Just enough of a BTF reader to find where a member sits in a kernel struct or union, and its
//! size: the egress programs (`super::egress`) and the conntrack kfunc lab read `struct nf_conn`
//! fields, and the socket lab `struct sock` and `struct sk_psock` fields, at offsets taken from
//! the running kernel's `/sys/kernel/btf/vmlinux` (aya-ebpf has no CO-RE).
use anyhow::{Context, Result, bail};

pub const VMLINUX: &str = "/sys/kernel/btf/vmlinux";

const BTF_MAGIC: u16 = 0xeb9f;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;

/// Byte offset of `member` in the struct (or union) named `strukt`, in the BTF blob `btf`.
pub fn member_offset(btf: &[u8], strukt: &str, member: &str) -> Result<u32> {
    layout(btf, strukt, Some(member))
}

/// Size in bytes of the struct (or union) named `strukt`, in the BTF blob `btf`.
pub fn struct_size(btf: &[u8], strukt: &str) -> Result<u32> {
    layout(btf, strukt, None)
}

/// `member`'s byte offset in the struct `strukt`, or the struct's size without a member.
fn layout(btf: &[u8], strukt: &str, member: Option<&str>) -> Result<u32> {
    let u16_at = |at: usize| -> Result<u16> {
        Ok(u16::from_le_bytes(
            btf.get(at..at + 2).context("BTF truncated")?.try_into()?,
        ))
    };
    let u32_at = |at: usize| -> Result<u32> {
        Ok(u32::from_le_bytes(
            btf.get(at..at + 4).context("BTF truncated")?.try_into()?,
        ))
    };
    if u16_at(0)? != BTF_MAGIC {
        bail!("not little-endian BTF");
    }
    let hdr_len = u32_at(4)? as usize;
    let (type_off, type_len) = (u32_at(8)? as usize, u32_at(12)? as usize);
    let (str_off, str_len) = (u32_at(16)? as usize, u32_at(20)? as usize);
    let strings = btf
        .get(hdr_len + str_off..hdr_len + str_off + str_len)
        .context("BTF string section out of bounds")?;
    let name = |off: u32| -> &[u8] {
        let rest = strings.get(off as usize..).unwrap_or_default();
        &rest[..rest.iter().position(|&b| b == 0).unwrap_or(rest.len())]
    };
    let (mut at, end) = (hdr_len + type_off, hdr_len + type_off + type_len);
    while at < end {
        let name_off = u32_at(at)?;
        let info = u32_at(at + 4)?;
        let vlen = (info & 0xffff) as usize;
        let kind = (info >> 24) & 0x1f;
        let kind_flag = info >> 31 == 1;
        at += 12;
        let extra = match kind {
            1 | 14 | 17 => 4,          // INT, VAR, DECL_TAG
            3 => 12,                   // ARRAY
            4 | 5 => vlen * 12,        // STRUCT, UNION
            6 | 13 => vlen * 8,        // ENUM, FUNC_PROTO
            15 | 19 => vlen * 12,      // DATASEC, ENUM64
            2 | 7..=12 | 16 | 18 => 0, // PTR, FWD, TYPEDEF, modifiers, FUNC, FLOAT, TYPE_TAG
            other => bail!("unknown BTF kind {other}"),
        };
        if (kind == KIND_STRUCT || kind == KIND_UNION) && name(name_off) == strukt.as_bytes() {
            let Some(member) = member else {
                return u32_at(at - 4);
            };
            for m in 0..vlen {
                let base = at + m * 12;
                if name(u32_at(base)?) == member.as_bytes() {
                    let raw = u32_at(base + 8)?;
                    let bits = if kind_flag { raw & 0x00ff_ffff } else { raw };
                    if bits % 8 != 0 {
                        bail!("{strukt}.{member} is a bitfield");
                    }
                    return Ok(bits / 8);
                }
            }
            bail!("struct {strukt} has no member {member}");
        }
        at += extra;
    }
    bail!("no struct {strukt} in BTF")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_socket_fields_in_the_running_kernel() {
        let Ok(btf) = std::fs::read(VMLINUX) else {
            eprintln!("skipping: no {VMLINUX}");
            return;
        };
        // sk_common is first in struct sock, and sk_rcvbuf comes well after it.
        let rcvbuf = member_offset(&btf, "sock", "sk_rcvbuf").expect("sk_rcvbuf");
        assert!(rcvbuf > 100 && rcvbuf < 4096, "{rcvbuf}");
        assert_eq!(
            member_offset(&btf, "sock", "__sk_common").expect("common"),
            0
        );
        assert!(member_offset(&btf, "sock", "no_such_member").is_err());
    }
}
