//! Links libtorch correctly when the `torch` feature is on, and compiles the project's C++
//! shim (`shim/`) against the same libtorch's headers.
//!
//! Always: writes `$OUT_DIR/benchmark_data.rs` from `benchmarks/*/benchmark.toml` (see
//! [`generate_benchmark_data`]), and compiles the ImageNet loader's JPEG region decoder.
//!
//! Without the link flags rustc's `--as-needed` drops libtorch_cuda (CUDA is then never
//! available at run time) and no rpath is set, so the binary cannot find libtorch.
//!
//! The shim (c10d process groups) needs gloo's headers, which the torch wheel lacks: Debian's
//! `libgloo-dev` provides them (`scripts/setup.sh` installs it). With the `nccl` feature the
//! shim also compiles ProcessGroupNCCL, which needs nccl.h and the CUDA headers (found in the
//! torch venv's `nvidia/` packages, or under CUDA_HOME). The CPU emulator of CUDA's execution
//! model is a second archive that only the integration-test programs link
//! ([`compile_cuda_emulator`]).
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=shim");
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    println!("cargo:rerun-if-env-changed=CUDA_HOME");
    generate_benchmark_data();
    compile_jpeg_region();
    if std::env::var_os("CARGO_FEATURE_TORCH").is_none() {
        return;
    }
    println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
    println!("cargo:rustc-link-arg=-ltorch");
    let lib = match std::env::var("DEP_TCH_LIBTORCH_LIB") {
        Ok(lib) => PathBuf::from(lib),
        Err(_) => {
            panic!(
                "DEP_TCH_LIBTORCH_LIB is not set: torch-sys did not report libtorch's lib folder. \
                 Run `source scripts/setup.sh` (it sets LIBTORCH_USE_PYTORCH=1) and rebuild."
            )
        }
    };
    println!("cargo:rustc-link-arg=-Wl,-rpath={}", lib.display());
    compile_shim(&lib);
}

fn compile_shim(lib: &Path) {
    let root = lib.parent().expect("libtorch lib folder has a parent");
    let inc = root.join("include");
    let api = inc.join("torch/csrc/api/include");
    for dir in [&inc, &api] {
        if !dir.is_dir() {
            panic!(
                "libtorch headers not found at {}: the torch installation next to {} is incomplete",
                dir.display(),
                lib.display()
            );
        }
    }
    if !Path::new("/usr/include/gloo/config.h").exists() {
        panic!(
            "gloo headers not found (/usr/include/gloo/config.h): install Debian's libgloo-dev \
             (`source scripts/setup.sh` does it)"
        );
    }
    let generated = generate_kernel_includes();
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .include(&generated)
        .pic(true)
        .std("c++17")
        // libtorch's headers as system headers: their own warnings are not ours to fix.
        .flag("-isystem")
        .flag(inc.to_str().expect("utf-8 libtorch path"))
        .flag("-isystem")
        .flag(api.to_str().expect("utf-8 libtorch path"))
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        .define("GLOG_USE_GLOG_EXPORT", None)
        .define("USE_C10D_GLOO", None)
        .warnings(true)
        .extra_warnings(true)
        .opt_level(2);
    // the CPU emulator of CUDA's execution model, for the test programs only (below)
    let mut emulator = build.clone();
    build
        .file("shim/dist.cpp")
        .file("shim/tensor.cpp")
        .file("shim/foreach.cpp")
        .file("shim/cuda.cpp")
        .file("shim/graph.cpp")
        .file("shim/reducer.cpp")
        .file("shim/fused_bn.cpp")
        .file("shim/fused_epilogue.cpp")
        .file("shim/loaders.cpp")
        .file("shim/cuda_emu_entry.cpp")
        .file("shim/fused_bias_gelu.cpp")
        .file("shim/fp8.cpp")
        .file("shim/fp8_attention.cpp")
        .file("shim/varlen_attention.cpp")
        .file("shim/ragged_resize.cpp");
    let nccl = std::env::var_os("CARGO_FEATURE_NCCL").is_some();
    let cuda = std::env::var_os("CARGO_FEATURE_CUDA").is_some();
    if nccl || cuda {
        for dir in cuda_include_dirs(root, nccl) {
            build
                .flag("-isystem")
                .flag(dir.to_str().expect("utf-8 CUDA path"));
        }
        // CUDA graph capture (shim/graph.cpp): at::cuda::CUDAGraph; cuDNN's fused BN+ReLU
        // (shim/fused_bn.cpp: cudnn.h from the venv's nvidia/cudnn, no link to libcudnn)
        build.define("MLPERF_RUN_CUDA", None);
        println!("cargo:rustc-link-arg=-ltorch_cuda");
        println!("cargo:rustc-link-arg=-lc10_cuda");
    }
    if nccl {
        build
            .define("USE_C10D_NCCL", None)
            .define("MLPERF_RUN_NCCL", None);
    }
    build.compile("mlperf_run_shim");
    compile_cuda_emulator(emulator.cargo_metadata(false));
}

/// The CPU emulator of CUDA's execution model (`shim/cuda_emu.cpp`, the fused epilogue's kernels
/// compiled for it, its self-checks) as an archive of its own, linked whole into the test
/// programs (`tests/*`) and nothing else: the mlperf-run binary and the examples carry none of
/// it, and the main shim reaches it through weak symbols (`shim/cuda_emu_entry.hpp`) that are
/// null there. Cargo tells a build script nothing about which targets will be built, so the
/// archive is compiled with the shim; only the test programs link it. `build` is the shim's
/// configuration (same flags and includes).
fn compile_cuda_emulator(build: &mut cc::Build) {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    build
        .file("shim/cuda_emu.cpp")
        .file("shim/fused_epilogue_emu.cpp")
        .file("shim/cuda_emu_selftest.cpp")
        .compile("mlperf_run_cuda_emu");
    let archive = out.join("libmlperf_run_cuda_emu.a");
    println!(
        "cargo:rustc-link-arg-tests=-Wl,--whole-archive,{},--no-whole-archive",
        archive.display()
    );
}

/// The fused epilogue's CUDA source (`shim/fused_epilogue.cu`) in the two forms the shim
/// includes, written to OUT_DIR (returned):
/// - `fused_epilogue_cu.inc`: the text as a C++ string literal, for NVRTC at run time;
/// - `fused_epilogue_emu_variants.inc`: the text included once per (HT, RT, OT) dtype triple,
///   each in its own namespace, plus the X-macro `MR_FE_EMU_VARIANTS(X)` listing them, for the
///   CPU emulator (`shim/fused_epilogue_emu.cpp`).
fn generate_kernel_includes() -> PathBuf {
    let source = Path::new("shim/fused_epilogue.cu");
    let text = std::fs::read_to_string(source)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", source.display()));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let write = |name: &str, body: String| {
        let path = out.join(name);
        std::fs::write(&path, body)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    };
    write("fused_epilogue_cu.inc", raw_string_literal(source, &text));
    // the ragged crop-resize kernels (shim/ragged_resize.cpp): NVRTC's text only (the CPU twin
    // includes the file itself)
    let ragged = Path::new("shim/ragged_resize.cu");
    let ragged_text = std::fs::read_to_string(ragged)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", ragged.display()));
    write(
        "ragged_resize_cu.inc",
        raw_string_literal(ragged, &ragged_text),
    );
    let abs = std::fs::canonicalize(source).expect("shim/fused_epilogue.cu exists");
    // dtype codes as in shim/fused_epilogue.cpp's type_name: 0 fp32, 1 bf16, 2 fp16
    let types = ["F32", "BF16", "F16"];
    let mut variants =
        String::from("// generated by build.rs: shim/fused_epilogue.cu once per (HT, RT, OT)\n");
    let mut list = String::from("#define MR_FE_EMU_VARIANTS(X)");
    for (ht, h) in types.iter().enumerate() {
        for (rt, r) in types.iter().enumerate() {
            for (ot, o) in types.iter().enumerate() {
                let ns = format!("v_{h}_{r}_{o}");
                variants.push_str(&format!(
                    "#define HT {h}\n#define RT {r}\n#define OT {o}\nnamespace {ns} {{\n#include \"{}\"\n}}\n#undef HT\n#undef RT\n#undef OT\n",
                    abs.display()
                ));
                list.push_str(&format!(" \\\n  X({ht}, {rt}, {ot}, {ns})"));
            }
        }
    }
    variants.push_str(&list);
    variants.push('\n');
    write("fused_epilogue_emu_variants.inc", variants);
    out
}

/// `text` (the file `source`) as a C++ raw string literal, for NVRTC at run time.
fn raw_string_literal(source: &Path, text: &str) -> String {
    let delim = "MRCUDA";
    assert!(
        !text.contains(&format!("){delim}\"")),
        "{} contains the raw-string delimiter ){delim}\"",
        source.display()
    );
    format!(
        "// generated by build.rs from {}\nR\"{delim}({text}){delim}\"\n",
        source.display()
    )
}

/// The benchmark facts that must exist at compile time, from `benchmarks/<name>/benchmark.toml`,
/// as `$OUT_DIR/benchmark_data.rs` (included by src/benchmarks.rs as `benchmarks::generated`):
/// - `BENCHMARK_TOMLS`: (name, text) of each benchmark.toml, embedded so the binary stands alone;
/// - `RCP_FILES`: (benchmark, path as in the toml, text) of every round's RCP file;
/// - `<NAME>_TARGET`: each benchmark's quality target, for the const rule tables
///   (src/rules/tables.rs);
/// - `ROUNDS_SUMMARY` and `DEFAULT_RULESETS`: the rounds and default rulesets, for help texts.
///
/// Only what build time needs is checked here (the file parses, `name` is the folder's name,
/// `target` is a number, every round names an RCP file that exists); src/benchmarks.rs
/// checks the rest when it loads the definitions.
fn generate_benchmark_data() {
    println!("cargo:rerun-if-changed=benchmarks");
    let root = std::fs::canonicalize("benchmarks").expect("benchmarks/ exists");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", root.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("benchmark.toml").is_file())
        .collect();
    dirs.sort();
    let lit = |s: &str| format!("{s:?}");
    let mut tomls = String::new();
    let mut rcps = String::new();
    let mut targets = String::new();
    let mut rounds_summary = Vec::new();
    let mut defaults = Vec::new();
    for dir in &dirs {
        let path = dir.join("benchmark.toml");
        let fail = |what: String| -> ! { panic!("{}: {what}", path.display()) };
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| fail(e.to_string()));
        let table: toml::Table = toml::from_str(&text).unwrap_or_else(|e| fail(e.to_string()));
        let folder = dir
            .file_name()
            .and_then(|n| n.to_str())
            .expect("utf-8 folder name");
        let name = table.get("name").and_then(|v| v.as_str());
        if name != Some(folder) {
            fail(format!(
                "name must be \"{folder}\" (the folder's name), got {name:?}"
            ));
        }
        if !folder
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            fail(format!(
                "the folder name {folder:?} must be lowercase letters, digits and _"
            ));
        }
        let target = match table.get("target") {
            Some(toml::Value::Float(x)) => *x,
            Some(toml::Value::Integer(x)) => *x as f64,
            other => fail(format!("target must be a number, got {other:?}")),
        };
        if let Some(d) = table.get("default_ruleset").and_then(|v| v.as_str()) {
            defaults.push(format!("{folder} {d}"));
        }
        let rounds = table
            .get("rounds")
            .and_then(|v| v.as_array())
            .unwrap_or_else(|| fail("no [[rounds]]".into()));
        let mut names = Vec::new();
        let mut seen_rcp: Vec<&str> = Vec::new();
        for round in rounds {
            let field = |key: &str| {
                round
                    .get(key)
                    .and_then(|v| v.as_str())
                    .unwrap_or_else(|| fail(format!("a [[rounds]] entry has no string `{key}`")))
            };
            names.push(field("name").to_string());
            let rcp = field("rcp");
            if seen_rcp.contains(&rcp) {
                continue;
            }
            seen_rcp.push(rcp);
            let file = dir.join(rcp);
            if !file.is_file() {
                fail(format!(
                    "round {}: rcp file {} not found",
                    field("name"),
                    file.display()
                ));
            }
            let abs = file.to_str().expect("utf-8 benchmarks path");
            rcps.push_str(&format!(
                "    ({}, {}, include_str!({})),\n",
                lit(folder),
                lit(rcp),
                lit(abs)
            ));
        }
        rounds_summary.push(format!("{folder} {}", names.join(", ")));
        tomls.push_str(&format!(
            "    ({}, include_str!({})),\n",
            lit(folder),
            lit(path.to_str().expect("utf-8 benchmarks path"))
        ));
        targets.push_str(&format!(
            "/// {folder}'s closed-division quality target (benchmarks/{folder}/benchmark.toml `target`).\n\
             pub const {}_TARGET: f64 = {target:?};\n",
            folder.to_ascii_uppercase()
        ));
    }
    let body = format!(
        "// generated by build.rs from benchmarks/*/benchmark.toml: do not edit\n\
         /// (name, text) of each `benchmarks/<name>/benchmark.toml`, ordered by name.\n\
         pub const BENCHMARK_TOMLS: &[(&str, &str)] = &[\n{tomls}];\n\
         /// (benchmark, path relative to `benchmarks/<benchmark>/`, text) of every round's RCP file.\n\
         pub const RCP_FILES: &[(&str, &str, &str)] = &[\n{rcps}];\n\
         {targets}\
         /// Each benchmark's rounds, for help texts: \"bert 2.0.0, ...; resnet ...\".\n\
         pub const ROUNDS_SUMMARY: &str = {};\n\
         /// Each benchmark's default ruleset, for help texts: \"bert 5.0.0, resnet 4.0.0\".\n\
         pub const DEFAULT_RULESETS: &str = {};\n",
        lit(&rounds_summary.join("; ")),
        lit(&defaults.join(", ")),
    );
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let dest = out.join("benchmark_data.rs");
    std::fs::write(&dest, body).unwrap_or_else(|e| panic!("cannot write {}: {e}", dest.display()));
}

/// The ImageNet loader's region decoder (shim/jpeg_region.c) on libjpeg-turbo's
/// libjpeg API (Debian's libjpeg62-turbo-dev; `scripts/setup.sh` installs it). Built with and
/// without the `torch` feature.
///
/// With MLPERF_RUN_SANITIZE=1 (the fuzz build, scripts/fuzz.sh) the file is compiled by clang
/// with AddressSanitizer, UBSan (trapping: no UBSan runtime to link) and libFuzzer's coverage
/// instrumentation; the fuzz targets' Rust code, built with `-Zsanitizer=address`, brings the
/// ASan runtime and libFuzzer the coverage callbacks.
fn compile_jpeg_region() {
    let source = "shim/jpeg_region.c";
    println!("cargo:rerun-if-changed={source}");
    println!("cargo:rerun-if-env-changed=MLPERF_RUN_SANITIZE");
    let sanitize = std::env::var("MLPERF_RUN_SANITIZE").is_ok_and(|v| v == "1");
    if !Path::new("/usr/include/jpeglib.h").exists()
        && !Path::new("/usr/local/include/jpeglib.h").exists()
    {
        panic!(
            "jpeglib.h not found: install libjpeg-turbo's development files (Debian: \
             libjpeg62-turbo-dev; `source scripts/setup.sh` does it)"
        );
    }
    let mut build = cc::Build::new();
    build
        .file(source)
        .warnings(true)
        .extra_warnings(true)
        .opt_level(2);
    if sanitize {
        build
            .compiler("clang")
            .flag("-fsanitize=address,undefined,fuzzer-no-link")
            .flag("-fsanitize-trap=undefined")
            .flag("-fno-omit-frame-pointer")
            .flag("-g");
    }
    build.compile("mlperf_run_jpeg_region");
    println!("cargo:rustc-link-lib=jpeg");
}

/// nccl.h and the CUDA headers: MLPERF_RUN_CUDA_INCLUDE (colon-separated folders), the torch
/// venv's nvidia packages (site-packages/nvidia/*/include, the parent of torch/; the pip
/// packages nvidia-cuda-crt and nvidia-cuda-cccl complete them), CUDA_HOME/include and
/// /usr/local/cuda/include. Panics naming what is missing.
fn cuda_include_dirs(torch_root: &Path, nccl: bool) -> Vec<PathBuf> {
    println!("cargo:rerun-if-env-changed=MLPERF_RUN_CUDA_INCLUDE");
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Ok(extra) = std::env::var("MLPERF_RUN_CUDA_INCLUDE") {
        candidates.extend(std::env::split_paths(&extra));
    }
    if let Some(site) = torch_root.parent() {
        if let Ok(entries) = std::fs::read_dir(site.join("nvidia")) {
            let mut found: Vec<PathBuf> = entries
                .flatten()
                .map(|e| e.path().join("include"))
                .collect();
            found.sort();
            candidates.extend(found);
        }
    }
    if let Ok(home) = std::env::var("CUDA_HOME") {
        candidates.push(Path::new(&home).join("include"));
    }
    candidates.push(PathBuf::from("/usr/local/cuda/include"));
    let mut dirs = Vec::new();
    for d in candidates.into_iter().filter(|d| d.is_dir()) {
        // CUDA 13 keeps libcu++ (cuda/std/...) under include/cccl.
        let cccl = d.join("cccl");
        dirs.push(d);
        if cccl.is_dir() {
            dirs.push(cccl);
        }
    }
    let has = |f: &str| dirs.iter().any(|d| d.join(f).exists());
    let needs_nccl = [("nccl.h", "the nvidia-nccl pip package or NCCL")];
    for (needed, from) in needs_nccl[..usize::from(nccl)].iter().copied().chain([
        (
            "cuda_runtime_api.h",
            "the CUDA toolkit (pip: nvidia-cuda-runtime)",
        ),
        (
            "crt/host_config.h",
            "the CUDA toolkit (pip: nvidia-cuda-crt)",
        ),
    ]) {
        if !has(needed) {
            panic!(
                "features `cuda`/`nccl`: {needed} not found in {dirs:?}; it comes with {from}. Install it \
                 and set CUDA_HOME or MLPERF_RUN_CUDA_INCLUDE, or build without NCCL, CUDA graphs \
                 and the fused kernels: `--no-default-features --features torch`"
            );
        }
    }
    dirs
}
