//! Kernel function (kfunc) calls in eBPF objects, resolved before aya 0.14 loads them
//! (docs/kfuncs.md).
//!
//! bpf-linker leaves a call to an `extern "C"` function of an aya-ebpf program as an ordinary
//! BPF-to-BPF call (`0x85`, `src_reg = BPF_PSEUDO_CALL`, `imm = -1`) with an `R_BPF_64_32`
//! relocation against an undefined symbol of that name. aya-obj 0.3 takes every such call for a
//! call into the object's own code and fails to relocate it ("function … not found"): aya 0.14
//! resolves no ksyms or kfuncs. This step rewrites, in a copy of the ELF file, each of those calls
//! into what the kernel expects of a kfunc call: `src_reg = BPF_PSEUDO_KFUNC_CALL`, `imm` the
//! kfunc's BTF id in the running kernel's vmlinux BTF, `off = 0` (vmlinux, no `fd_array`).
//! aya-obj then leaves the call alone (it is no longer a pseudo call, and its relocation names no
//! section), and the verifier takes the kfunc's prototype from vmlinux BTF by that id.
//!
//! Limits: kfuncs of vmlinux only (a kernel module's need the module's BTF fd in the program's
//! `fd_array`, which aya 0.14 never passes: such a kfunc is refused, naming the module); calls
//! only (a kfunc or ksym named by anything but a `call`, `bpf_ksym_exists`-style, is refused); no
//! weak kfuncs (a kfunc this kernel lacks fails the load, naming it).
use std::{ops::Deref, path::Path};

use anyhow::{Context, Result, bail};
use aya_obj::btf::{Btf, BtfKind};
use object::{
    Object as _, ObjectSection as _, ObjectSymbol as _, RelocationFlags, RelocationTarget,
    SectionKind, SymbolKind,
    elf::{R_BPF_64_32, STT_NOTYPE},
    read::elf::ElfFile64,
};

/// The running kernel's own BTF.
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

const INSN_SIZE: usize = 8;
/// `BPF_JMP | BPF_CALL`.
const OP_CALL: u8 = 0x85;
const BPF_PSEUDO_CALL: u8 = 1;
const BPF_PSEUDO_KFUNC_CALL: u8 = 2;
/// Size of an `Elf64_Sym`, and where its `st_info` byte sits in it.
const ELF64_SYM_SIZE: usize = 24;
const ST_INFO_AT: usize = 4;

/// A call to a function the object does not define: a kfunc to resolve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KfuncCall {
    /// The function's name, as the kernel's BTF names it.
    pub name: String,
    /// Where the call instruction starts in the ELF file.
    pub insn_at: usize,
    /// Where the `st_info` byte of the undefined symbol starts in the ELF file, if the symbol is
    /// typed as a function: aya-obj takes a function symbol for a subprogram of the object and
    /// would look for its section, so the copy types it `STT_NOTYPE`, as bpf-linker does.
    pub func_symbol_info_at: Option<usize>,
}

/// The calls to undefined functions in the executable sections of the little-endian ELF object
/// `elf`, in file order. Fails on a relocation against an undefined symbol that is not on a
/// `call` instruction (ksym variables, `bpf_ksym_exists`), which this step does not resolve.
pub fn kfunc_calls(elf: &[u8]) -> Result<Vec<KfuncCall>> {
    let file = ElfFile64::<object::Endianness>::parse(elf).context("not a 64-bit ELF object")?;
    if !file.is_little_endian() {
        bail!("a big-endian eBPF object: kfunc calls are resolved for little-endian ones only");
    }
    let symtab_at = file
        .section_by_name(".symtab")
        .and_then(|s| s.file_range())
        .map(|(at, _)| at as usize);
    let mut calls = Vec::new();
    for section in file.sections().filter(|s| s.kind() == SectionKind::Text) {
        let Some((section_at, section_len)) = section.file_range() else {
            continue;
        };
        for (offset, relocation) in section.relocations() {
            let RelocationTarget::Symbol(index) = relocation.target() else {
                continue;
            };
            let symbol = file
                .symbol_by_index(index)
                .with_context(|| format!("relocation against a missing symbol #{}", index.0))?;
            if !symbol.is_undefined() {
                continue;
            }
            let name = symbol
                .name()
                .context("an undefined symbol without a name")?;
            let section_name = section.name().unwrap_or("?");
            let RelocationFlags::Elf { r_type } = relocation.flags() else {
                bail!("`{name}` in {section_name}: not an ELF relocation");
            };
            if offset % INSN_SIZE as u64 != 0 || offset + INSN_SIZE as u64 > section_len {
                bail!("`{name}` in {section_name}: relocation at {offset} is off an instruction");
            }
            let insn_at = (section_at + offset) as usize;
            let insn = &elf[insn_at..insn_at + INSN_SIZE];
            if r_type != R_BPF_64_32 || !is_pseudo_call(insn) {
                bail!(
                    "`{name}` in {section_name} is referenced by something else than a call \
                     (relocation type {r_type}, opcode {:#04x}): ksym variables and \
                     bpf_ksym_exists are not supported, only kfunc calls",
                    insn[0]
                );
            }
            let func_symbol_info_at = match (symbol.kind(), symtab_at) {
                (SymbolKind::Text, Some(at)) => Some(at + index.0 * ELF64_SYM_SIZE + ST_INFO_AT),
                (SymbolKind::Text, None) => bail!("`{name}`: a symbol without a .symtab"),
                _ => None,
            };
            calls.push(KfuncCall {
                name: name.to_owned(),
                insn_at,
                func_symbol_info_at,
            });
        }
    }
    calls.sort_by_key(|c| c.insn_at);
    Ok(calls)
}

/// Whether the 8 bytes of `insn` are a BPF-to-BPF call as LLVM emits one: `BPF_JMP | BPF_CALL`,
/// `src_reg = BPF_PSEUDO_CALL`, `dst_reg = 0`.
pub fn is_pseudo_call(insn: &[u8]) -> bool {
    insn.len() == INSN_SIZE && insn[0] == OP_CALL && insn[1] == BPF_PSEUDO_CALL << 4
}

/// Rewrites the call instruction `insn` into a call of the vmlinux kfunc whose BTF id is
/// `btf_id`: `src_reg = BPF_PSEUDO_KFUNC_CALL`, `dst_reg = 0`, `off = 0` (vmlinux's BTF; a
/// module's would be its index in `fd_array`), `imm = btf_id`.
pub fn patch_call(insn: &mut [u8], btf_id: u32) {
    insn[0] = OP_CALL;
    insn[1] = BPF_PSEUDO_KFUNC_CALL << 4;
    insn[2..4].copy_from_slice(&0u16.to_le_bytes());
    insn[4..8].copy_from_slice(&btf_id.to_le_bytes());
}

/// A copy of an eBPF object, 8-byte aligned as aya wants its input.
pub struct AlignedObject {
    words: Vec<u64>,
    len: usize,
}

impl AlignedObject {
    fn copy_of(bytes: &[u8]) -> Self {
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        // SAFETY: `words` holds at least `bytes.len()` initialized bytes, and any byte pattern is
        // a valid u64; the two buffers do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                words.as_mut_ptr().cast::<u8>(),
                bytes.len(),
            );
        }
        Self {
            words,
            len: bytes.len(),
        }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: the first `len` bytes of `words` are initialized (copy_of), u8 has no
        // alignment needs, and the borrow of `self` keeps `words` alive and unaliased.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast::<u8>(), self.len) }
    }
}

impl Deref for AlignedObject {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: as in bytes_mut, shared.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), self.len) }
    }
}

/// A copy of the ELF object `elf` in which every kfunc call is resolved with `btf_id` (a kfunc's
/// name to its BTF id in vmlinux), and the names of the kfuncs it resolved, each once, in the
/// order of their first call. An object without kfunc calls is copied as it is.
pub fn resolve(
    elf: &[u8],
    btf_id: impl Fn(&str) -> Result<u32>,
) -> Result<(AlignedObject, Vec<String>)> {
    let calls = kfunc_calls(elf)?;
    let mut object = AlignedObject::copy_of(elf);
    let bytes = object.bytes_mut();
    let mut names: Vec<String> = Vec::new();
    for call in calls {
        let id = btf_id(&call.name)?;
        patch_call(&mut bytes[call.insn_at..call.insn_at + INSN_SIZE], id);
        if let Some(at) = call.func_symbol_info_at {
            bytes[at] = (bytes[at] & 0xf0) | STT_NOTYPE;
        }
        if !names.contains(&call.name) {
            names.push(call.name);
        }
    }
    Ok((object, names))
}

/// The running kernel's vmlinux BTF, to look kfuncs up in by name.
pub struct KernelFuncs {
    btf: Btf,
}

impl KernelFuncs {
    /// Reads `/sys/kernel/btf/vmlinux`.
    pub fn vmlinux() -> Result<Self> {
        let btf = Btf::parse_file(VMLINUX_BTF, object::Endianness::default())
            .with_context(|| format!("cannot read {VMLINUX_BTF}: kfunc calls need BTF"))?;
        Ok(Self { btf })
    }

    /// The BTF id of the function `name` in vmlinux. A function that only a module's BTF
    /// (`/sys/kernel/btf/MODULE`) names is refused with the module named: calling it would need
    /// that module's BTF in the program's `fd_array`, which aya 0.14 does not pass.
    pub fn id(&self, name: &str) -> Result<u32> {
        if let Ok(id) = self.btf.id_by_type_name_kind(name, BtfKind::Func) {
            return Ok(id);
        }
        match module_naming(Path::new(VMLINUX_BTF).parent(), name) {
            Some(module) => bail!(
                "kfunc {name} is in the BTF of module {module}, not in vmlinux: module kfuncs \
                 need the module's BTF in fd_array, which aya 0.14 cannot pass"
            ),
            None => bail!("this kernel has no kfunc {name} (not in {VMLINUX_BTF})"),
        }
    }
}

/// The first kernel module under `btf_dir` whose BTF strings hold `name`.
fn module_naming(btf_dir: Option<&Path>, name: &str) -> Option<String> {
    let needle = [b"\0", name.as_bytes(), b"\0"].concat();
    let entries = std::fs::read_dir(btf_dir?).ok()?;
    entries.flatten().find_map(|entry| {
        let module = entry.file_name().to_string_lossy().into_owned();
        if module == "vmlinux" {
            return None;
        }
        let blob = std::fs::read(entry.path()).ok()?;
        blob.windows(needle.len())
            .any(|w| w == needle)
            .then_some(module)
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// The conntrack kfunc lab (ebpf/programs/src/ct_lab.rs) and the kfuncs it calls.
    static CT_LAB: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/dxdp-ct-lab"));
    const LAB_KFUNCS: [&str; 3] = [
        "bpf_ct_change_timeout",
        "bpf_ct_release",
        "bpf_skb_ct_lookup",
    ];

    const CALL_EXTERN: [u8; 8] = [0x85, 0x10, 0, 0, 0xff, 0xff, 0xff, 0xff];

    #[test]
    fn a_pseudo_call_becomes_a_kfunc_call_by_btf_id() {
        assert!(is_pseudo_call(&CALL_EXTERN));
        let mut insn = CALL_EXTERN;
        patch_call(&mut insn, 65096);
        assert_eq!(insn, [0x85, 0x20, 0, 0, 0x48, 0xfe, 0, 0]);
        assert!(!is_pseudo_call(&insn));
    }

    #[test]
    fn helper_calls_and_other_instructions_are_not_pseudo_calls() {
        // call bpf_map_lookup_elem (helper 1): src_reg 0.
        assert!(!is_pseudo_call(&[0x85, 0x00, 0, 0, 1, 0, 0, 0]));
        // r1 = 0 ll, with a map relocation.
        assert!(!is_pseudo_call(&[0x18, 0x11, 0, 0, 0, 0, 0, 0]));
        assert!(!is_pseudo_call(&CALL_EXTERN[..4]));
    }

    #[test]
    fn bpf_linker_leaves_extern_calls_as_pseudo_calls_against_undefined_symbols() {
        let calls = kfunc_calls(CT_LAB).unwrap();
        // One call site per name or more (LLVM duplicates some into branches).
        let names: BTreeSet<&str> = calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, BTreeSet::from(LAB_KFUNCS));
        for call in &calls {
            assert_eq!(CT_LAB[call.insn_at..call.insn_at + 8], CALL_EXTERN);
            // bpf-linker types the undefined symbols STT_NOTYPE.
            assert_eq!(call.func_symbol_info_at, None);
        }
    }

    #[test]
    fn the_datapath_object_calls_no_kfunc() {
        assert_eq!(kfunc_calls(super::super::OBJECT).unwrap(), []);
        let (copy, names) = resolve(super::super::OBJECT, |n| bail!("asked for {n}")).unwrap();
        assert!(names.is_empty());
        assert_eq!(&*copy, super::super::OBJECT);
    }

    /// What aya-obj 0.3 does with the lab before and after this step, short of the kernel:
    /// the unresolved calls fail its call relocation, the resolved ones pass untouched.
    #[test]
    fn aya_obj_fails_on_unresolved_kfunc_calls_and_keeps_resolved_ones() {
        let relocate = |elf: &[u8]| {
            let mut obj = aya_obj::Object::parse(elf).unwrap();
            // The object's text sections, as aya's loader collects them.
            let text = ElfFile64::<object::Endianness>::parse(elf)
                .unwrap()
                .sections()
                .filter(|s| s.kind() == SectionKind::Text)
                .map(|s| s.index().0)
                .collect();
            obj.relocate_calls(&text).map(|()| obj)
        };
        let err = relocate(CT_LAB).expect_err("aya-obj relocated a kfunc call");
        let chain = format!("{:#}", anyhow::Error::from(err));
        assert!(chain.contains("not found while relocating"), "{chain}");

        let ids = |name: &str| match name {
            "bpf_skb_ct_lookup" => Ok(65096),
            "bpf_ct_change_timeout" => Ok(63210),
            "bpf_ct_release" => Ok(63216),
            other => bail!("unexpected {other}"),
        };
        let (copy, names) = resolve(CT_LAB, ids).unwrap();
        // Each name once, in the order of its first call.
        assert_eq!(names.len(), LAB_KFUNCS.len(), "{names:?}");
        let names: BTreeSet<&str> = names.iter().map(String::as_str).collect();
        assert_eq!(names, BTreeSet::from(LAB_KFUNCS));
        let obj = relocate(&copy).expect("aya-obj refused the resolved calls");
        let program = obj
            .functions
            .values()
            .find(|f| f.name == "dxdp_ct_probe")
            .unwrap();
        let kfunc_calls: BTreeSet<(u8, i16, i32)> = program
            .instructions
            .iter()
            .filter(|i| i.code == OP_CALL && i.src_reg() == BPF_PSEUDO_KFUNC_CALL)
            .map(|i| (i.dst_reg(), i.off, i.imm))
            .collect();
        let expected = [(0, 0, 63210), (0, 0, 63216), (0, 0, 65096)];
        assert_eq!(kfunc_calls, BTreeSet::from(expected));
    }

    #[test]
    fn a_missing_kfunc_fails_the_resolution_by_name() {
        let err = resolve(CT_LAB, |n| bail!("no {n}")).err().unwrap();
        assert_eq!(err.to_string(), "no bpf_skb_ct_lookup");
    }

    #[test]
    fn a_module_is_named_when_its_btf_holds_the_name() {
        let dir = std::env::temp_dir().join(format!("dxdp-kfunc-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("vmlinux"), b"\0bpf_fake_kfunc\0").unwrap();
        std::fs::write(dir.join("nf_fake"), b"\0other\0bpf_fake_kfunc\0").unwrap();
        let found = module_naming(Some(&dir), "bpf_fake_kfunc");
        let missing = module_naming(Some(&dir), "bpf_fake");
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(found.as_deref(), Some("nf_fake"));
        assert_eq!(missing, None);
    }
}
