//! Where a member sits in a kernel struct, by the running kernel's BTF: the library's reader,
//! which the egress programs' loader uses too.
pub(crate) use dxdp::datapath::btf_layout::{VMLINUX, member_offset, struct_size};
