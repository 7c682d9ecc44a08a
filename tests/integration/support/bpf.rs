//! bpf(2) and bpftool as another tool would use them: programs loaded and pinned by hand, links
//! updated in place, and bpftool's JSON.

use std::{
    os::fd::{FromRawFd, OwnedFd},
    path::Path,
};

use super::{guards::PinnedObject, process::must};

/// `bpftool -j ARGS…`, parsed; panics naming the command if it fails or prints no JSON.
pub fn bpftool(args: &[&str]) -> serde_json::Value {
    let out = must(&[&["bpftool", "-j"], args].concat());
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("bpftool {args:?}: {e}: {out}"))
}

/// A minimal XDP program (`return XDP_PASS`) loaded straight through bpf(2), as some other tool
/// would, and pinned at `path` so that `ip link set … xdp pinned PATH` can attach it. The pin is
/// removed on drop (or earlier with [`PinnedObject::unpin`]); an attachment keeps the program
/// alive after that.
pub fn load_foreign_xdp(path: &Path, name: &str) -> PinnedObject {
    const BPF_PROG_TYPE_XDP: u32 = 6;
    const XDP_PASS: i32 = 2;
    load_constant_program(path, name, BPF_PROG_TYPE_XDP, XDP_PASS)
}

/// A minimal tc program that lets every frame go on (`return TCX_NEXT`), pinned at `path`: what
/// an older dxdp's program looks like to a newer one (same type, another tag).
pub fn load_passing_tc(path: &Path, name: &str) -> PinnedObject {
    const BPF_PROG_TYPE_SCHED_CLS: u32 = 3;
    const TCX_NEXT: i32 = -1;
    load_constant_program(path, name, BPF_PROG_TYPE_SCHED_CLS, TCX_NEXT)
}

/// Points the pinned bpf_link at `link_pin` to the program pinned at `prog_pin`
/// (BPF_LINK_UPDATE), as a running attachment is swapped in place.
pub fn update_pinned_link(link_pin: &Path, prog_pin: &Path) {
    #[repr(C)]
    struct LinkUpdate {
        link_fd: u32,
        new_prog_fd: u32,
        flags: u32,
        old_prog_fd: u32,
    }
    const BPF_LINK_UPDATE: libc::c_long = 29;
    let link = bpf_obj_get(link_pin);
    let prog = bpf_obj_get(prog_pin);
    let attr = LinkUpdate {
        link_fd: std::os::fd::AsRawFd::as_raw_fd(&link) as u32,
        new_prog_fd: std::os::fd::AsRawFd::as_raw_fd(&prog) as u32,
        flags: 0,
        old_prog_fd: 0,
    };
    let what = format!("BPF_LINK_UPDATE {}", link_pin.display());
    // SAFETY: attr is a valid prefix of union bpf_attr for BPF_LINK_UPDATE.
    unsafe { sys_bpf(BPF_LINK_UPDATE, &attr, &what) };
}

/// bpf(2) with `attr` as the command's part of union bpf_attr; panics naming `what` on failure.
///
/// # Safety
/// `attr` must be a `#[repr(C)]` prefix of union bpf_attr for `cmd`, and every pointer in it
/// valid for the call.
unsafe fn sys_bpf<T>(cmd: libc::c_long, attr: &T, what: &str) -> libc::c_long {
    // SAFETY: the caller vouches for attr; its size is passed along with it.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *const T,
            std::mem::size_of::<T>(),
        )
    };
    assert!(rc >= 0, "{what}: {}", std::io::Error::last_os_error());
    rc
}

#[repr(C)]
struct ObjPath {
    pathname: u64,
    bpf_fd: u32,
    file_flags: u32,
}

/// An fd for the object pinned at `path` (BPF_OBJ_GET).
fn bpf_obj_get(path: &Path) -> OwnedFd {
    const BPF_OBJ_GET: libc::c_long = 7;
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("no NUL");
    let attr = ObjPath {
        pathname: c_path.as_ptr() as u64,
        bpf_fd: 0,
        file_flags: 0,
    };
    let what = format!("BPF_OBJ_GET {}", path.display());
    // SAFETY: attr is a valid prefix of union bpf_attr for BPF_OBJ_GET; c_path outlives the call.
    let fd = unsafe { sys_bpf(BPF_OBJ_GET, &attr, &what) };
    // SAFETY: the kernel just returned this descriptor; nothing else owns it.
    unsafe { OwnedFd::from_raw_fd(fd as i32) }
}

/// A two-instruction program of `prog_type` returning `verdict`, loaded through bpf(2) and
/// pinned at `path`.
fn load_constant_program(path: &Path, name: &str, prog_type: u32, verdict: i32) -> PinnedObject {
    #[repr(C)]
    struct Insn {
        code: u8,
        regs: u8,
        off: i16,
        imm: i32,
    }
    #[repr(C)]
    struct ProgLoad {
        prog_type: u32,
        insn_cnt: u32,
        insns: u64,
        license: u64,
        log_level: u32,
        log_size: u32,
        log_buf: u64,
        kern_version: u32,
        prog_flags: u32,
        prog_name: [u8; 16],
        prog_ifindex: u32,
        expected_attach_type: u32,
    }
    const BPF_PROG_LOAD: libc::c_long = 5;
    const BPF_OBJ_PIN: libc::c_long = 6;

    let insns = [
        // r0 = verdict (BPF_ALU64 | BPF_MOV | BPF_K)
        Insn {
            code: 0xb7,
            regs: 0,
            off: 0,
            imm: verdict,
        },
        // exit (BPF_JMP | BPF_EXIT)
        Insn {
            code: 0x95,
            regs: 0,
            off: 0,
            imm: 0,
        },
    ];
    let license = c"GPL";
    let mut prog_name = [0u8; 16];
    assert!(name.len() < 16);
    prog_name[..name.len()].copy_from_slice(name.as_bytes());
    let attr = ProgLoad {
        prog_type,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: 0,
        log_size: 0,
        log_buf: 0,
        kern_version: 0,
        prog_flags: 0,
        prog_name,
        prog_ifindex: 0,
        expected_attach_type: 0,
    };
    // SAFETY: attr is a valid prefix of union bpf_attr for BPF_PROG_LOAD; the pointers in it
    // (instructions, license) outlive the call.
    let fd = unsafe { sys_bpf(BPF_PROG_LOAD, &attr, "BPF_PROG_LOAD") };
    // SAFETY: the kernel just returned this descriptor; nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("no NUL");
    let pin = ObjPath {
        pathname: c_path.as_ptr() as u64,
        bpf_fd: std::os::fd::AsRawFd::as_raw_fd(&fd) as u32,
        file_flags: 0,
    };
    let what = format!("BPF_OBJ_PIN {}", path.display());
    // SAFETY: attr is a valid prefix of union bpf_attr for BPF_OBJ_PIN; c_path outlives the call.
    unsafe { sys_bpf(BPF_OBJ_PIN, &pin, &what) };
    PinnedObject {
        path: path.to_path_buf(),
    }
}

/// (program id, program tag) of the program pinned at `path`.
pub fn pinned_program(path: &Path) -> (u64, String) {
    let prog = bpftool(&["prog", "show", "pinned", &path.to_string_lossy()]);
    (
        prog["id"].as_u64().expect("prog id"),
        prog["tag"].as_str().expect("prog tag").to_owned(),
    )
}

/// (link id, program id) of the bpf_link pinned at `path`.
pub fn pinned_link(path: &Path) -> (u64, u64) {
    let link = bpftool(&["link", "show", "pinned", &path.to_string_lossy()]);
    (
        link["id"].as_u64().expect("link id"),
        link["prog_id"].as_u64().expect("link prog_id"),
    )
}
