//! Gives the shared library MPICH's shared-object name, so that programs
//! linked against Debian's MPICH (`libmpich.so.12`) load it unchanged.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libmpich.so.12");
    println!("cargo:rerun-if-changed=build.rs");
}
