//! Finding and opening NVIDIA's shared libraries at run time (libnvjpeg, libcudart), for the
//! entry points declared in [`super::nvjpeg`] and [`super::cudart`]: no link-time dependency,
//! so CPU builds and machines without them are unaffected.
//!
//! A library comes from its explicit path when one is given (`MLPERF_RUN_NVJPEG`,
//! `MLPERF_RUN_CUDART`), else the dynamic loader's path by soname, `CUDA_HOME/lib64`,
//! /usr/local/cuda/lib64, or the venv's nvidia pip packages (`MLPERF_RUN_VENV` or
//! `VIRTUAL_ENV`, and the torch whose lib folder is on `LD_LIBRARY_PATH`).
use libloading::Library;
use std::path::{Path, PathBuf};

/// Where to look for a shared library: the explicit path alone when given, else the loader's
/// path by soname, then the CUDA and venv folders.
pub(crate) fn candidates(explicit: Option<PathBuf>, sonames: &[&str]) -> Vec<PathBuf> {
    if let Some(p) = explicit {
        return vec![p];
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(home) = std::env::var_os("CUDA_HOME") {
        dirs.push(Path::new(&home).join("lib64"));
    }
    dirs.push(PathBuf::from("/usr/local/cuda/lib64"));
    // the Python environments' site-packages: the venvs named in the environment, and those of
    // the torch whose lib folder is on LD_LIBRARY_PATH (how scripts/bench_gpu.sh runs a bundle)
    let mut sites: Vec<PathBuf> = Vec::new();
    for venv in ["MLPERF_RUN_VENV", "VIRTUAL_ENV"]
        .iter()
        .filter_map(std::env::var_os)
    {
        let lib = Path::new(&venv).join("lib");
        for py in std::fs::read_dir(&lib).into_iter().flatten().flatten() {
            sites.push(py.path().join("site-packages"));
        }
    }
    if let Some(paths) = std::env::var_os("LD_LIBRARY_PATH") {
        sites.extend(std::env::split_paths(&paths).filter_map(torch_site_packages));
    }
    for site in sites {
        let nvidia = site.join("nvidia");
        for sub in ["cu13/lib", "nvjpeg/lib", "cuda_runtime/lib"] {
            dirs.push(nvidia.join(sub));
        }
    }
    let mut out: Vec<PathBuf> = sonames.iter().map(PathBuf::from).collect();
    for d in &dirs {
        out.extend(sonames.iter().map(|s| d.join(s)));
    }
    // torchvision's CUDA wheel carries its own copies under hashed names
    // (site-packages/torchvision.libs/libnvjpeg.<hash>.so.13)
    for site in dirs.iter().filter_map(|d| d.parent()?.parent()?.parent()) {
        for f in hashed_copies(&site.join("torchvision.libs"), sonames) {
            if !out.contains(&f) {
                out.push(f);
            }
        }
    }
    out
}

/// The site-packages folder of a torch whose library folder is `lib` (`.../site-packages/torch/lib`).
fn torch_site_packages(lib: PathBuf) -> Option<PathBuf> {
    let torch = lib.parent()?;
    (lib.file_name()? == "lib" && torch.file_name()? == "torch")
        .then(|| torch.parent())?
        .map(Path::to_path_buf)
}

/// The libraries in `dir` named as auditwheel renames them: `libnvjpeg.<hash>.so.13` for the
/// soname `libnvjpeg.so.13` (sorted).
fn hashed_copies(dir: &Path, sonames: &[&str]) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            sonames.iter().any(|s| {
                let (stem, version) = s.split_once(".so").unwrap_or((s, ""));
                name.starts_with(&format!("{stem}.")) && name.ends_with(&format!(".so{version}"))
            })
        })
        .collect();
    found.sort();
    found
}

pub(crate) fn open_first(what: &str, paths: &[PathBuf]) -> Result<(Library, PathBuf), String> {
    let mut last = String::new();
    for p in paths {
        // A bare soname goes through the dynamic loader's search; a path must exist.
        if p.components().count() > 1 && !p.exists() {
            continue;
        }
        // SAFETY: loading a CUDA library runs its initialisers, which have no preconditions.
        match unsafe { Library::new(p) } {
            Ok(lib) => return Ok((lib, p.clone())),
            Err(e) => last = e.to_string(),
        }
    }
    let tried: Vec<String> = paths
        .iter()
        .take(6)
        .map(|p| p.display().to_string())
        .collect();
    Err(format!(
        "{what} not found (tried {}{}){}",
        tried.join(", "),
        if paths.len() > 6 { ", ..." } else { "" },
        if last.is_empty() {
            String::new()
        } else {
            format!("; last error: {last}")
        }
    ))
}

/// libcudart (`MLPERF_RUN_CUDART`, else the search path): the library and where it was found;
/// the error says what was tried and what to install. The instance libtorch loaded, when it
/// did (the same soname): the dynamic loader hands back the library already loaded.
pub(crate) fn open_cudart() -> Result<(Library, PathBuf), String> {
    open_first(
        "libcudart",
        &candidates(
            std::env::var_os("MLPERF_RUN_CUDART").map(PathBuf::from),
            &["libcudart.so.13", "libcudart.so.12", "libcudart.so"],
        ),
    )
    .map_err(|e| format!("{e}: install the CUDA runtime (pip: nvidia-cuda-runtime)"))
}

/// Copy function pointer `name` out of `lib` (loaded from `file`, for the message).
pub(crate) fn symbol<T: Copy>(lib: &Library, file: &Path, name: &str) -> Result<T, String> {
    // SAFETY: the type T is the documented C signature of `name`.
    unsafe {
        lib.get::<T>(name.as_bytes())
            .map(|s| *s)
            .map_err(|e| format!("{} lacks {name}: {e}", file.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torch_lib_folder_leads_to_its_site_packages() {
        let site = torch_site_packages(PathBuf::from("/v/lib/python3.12/site-packages/torch/lib"));
        assert_eq!(site, Some(PathBuf::from("/v/lib/python3.12/site-packages")));
        assert_eq!(torch_site_packages(PathBuf::from("/usr/lib")), None);
        assert_eq!(torch_site_packages(PathBuf::from("/opt/bundle/lib")), None);
    }

    #[test]
    fn torchvisions_renamed_copies_are_found() {
        let dir = tempfile::tempdir().unwrap();
        for f in [
            "libnvjpeg.36e11081.so.13",
            "libcudart.faf08d9a.so.13",
            "libnvjpeg.x.so.12",
        ] {
            std::fs::write(dir.path().join(f), b"").unwrap();
        }
        let found = hashed_copies(dir.path(), &["libnvjpeg.so.13"]);
        assert_eq!(found, [dir.path().join("libnvjpeg.36e11081.so.13")]);
        assert!(hashed_copies(&dir.path().join("missing"), &["libnvjpeg.so.13"]).is_empty());
    }

    #[test]
    fn search_covers_sonames_cuda_home_and_the_venv() {
        let c = candidates(None, &["libnvjpeg.so.12"]);
        assert_eq!(c[0], PathBuf::from("libnvjpeg.so.12"));
        assert!(c
            .iter()
            .any(|p| p == Path::new("/usr/local/cuda/lib64/libnvjpeg.so.12")));
        let only = candidates(Some(PathBuf::from("/x/lib.so")), &["libnvjpeg.so.12"]);
        assert_eq!(only, vec![PathBuf::from("/x/lib.so")]);
    }
}
