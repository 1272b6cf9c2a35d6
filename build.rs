//! Links libtorch correctly when the `torch` feature is on.
//!
//! Without these flags rustc's `--as-needed` drops libtorch_cuda (CUDA is then never
//! available at run time) and no rpath is set, so the binary cannot find libtorch.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    if std::env::var_os("CARGO_FEATURE_TORCH").is_none() {
        return;
    }
    println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
    println!("cargo:rustc-link-arg=-ltorch");
    if let Ok(lib) = std::env::var("DEP_TCH_LIBTORCH_LIB") {
        println!("cargo:rustc-link-arg=-Wl,-rpath={lib}");
    }
}
