#![no_std]

/// What every object of this package needs beside its programs: the BPF target's panic handler,
/// an empty `main` for the host build (which exists for the linters only) and the license the
/// kernel checks for GPL-only helpers.
#[macro_export]
macro_rules! object_boilerplate {
    () => {
        #[cfg(target_arch = "bpf")]
        #[panic_handler]
        fn panic(_info: &core::panic::PanicInfo) -> ! {
            loop {}
        }

        /// The host build exists for the linters; the programs run only in the kernel.
        #[cfg(not(target_arch = "bpf"))]
        fn main() {}

        #[unsafe(link_section = "license")]
        #[unsafe(no_mangle)]
        static LICENSE: [u8; 4] = *b"GPL\0";
    };
}
