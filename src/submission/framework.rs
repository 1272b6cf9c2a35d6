//! The software fields: the `framework` string (mlperf-run, libtorch, CUDA) and the
//! `other_software_stack` table. libtorch's version is read at run time, so the log-only
//! build (no `torch` feature) describes the libtorch the training binary is built against.

use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// libtorch as found on this machine.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Libtorch {
    /// e.g. "2.11.0+cu130".
    pub version: String,
    /// CUDA version libtorch was built with, e.g. "13.0".
    pub cuda: Option<String>,
}

/// Find libtorch's version: `$MLPERF_RUN_LIBTORCH_VERSION`, `$LIBTORCH/build-version`, then the
/// PyTorch in the project's venv (`$MLPERF_RUN_VENV` or ~/.cache/mlperf-run/venv).
pub fn find_libtorch() -> Option<Libtorch> {
    if let Ok(v) = std::env::var("MLPERF_RUN_LIBTORCH_VERSION") {
        if !v.trim().is_empty() {
            return Some(from_version(v.trim()));
        }
    }
    if let Some(dir) = std::env::var_os("LIBTORCH") {
        if let Ok(v) = std::fs::read_to_string(Path::new(&dir).join("build-version")) {
            return Some(from_version(v.trim()));
        }
    }
    let venv = std::env::var_os("MLPERF_RUN_VENV")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/mlperf-run/venv"))
        })?;
    for entry in std::fs::read_dir(venv.join("lib")).ok()?.flatten() {
        let file = entry.path().join("site-packages/torch/version.py");
        if let Ok(text) = std::fs::read_to_string(&file) {
            if let Some(lt) = parse_torch_version_py(&text) {
                return Some(lt);
            }
        }
    }
    None
}

fn from_version(v: &str) -> Libtorch {
    // "2.11.0+cu130" -> CUDA "13.0"
    let cuda = v.split_once("+cu").and_then(|(_, c)| {
        let c: String = c.chars().take_while(|ch| ch.is_ascii_digit()).collect();
        (c.len() >= 2).then(|| format!("{}.{}", &c[..c.len() - 1], &c[c.len() - 1..]))
    });
    Libtorch {
        version: v.to_string(),
        cuda,
    }
}

/// Read `__version__` and `cuda` from PyTorch's torch/version.py.
pub fn parse_torch_version_py(text: &str) -> Option<Libtorch> {
    let field = |name: &str| {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once('=')?;
            let k = k.trim().split(':').next()?.trim();
            (k == name).then(|| v.trim().trim_matches(|c| c == '\'' || c == '"').to_string())
        })
    };
    let version = field("__version__")?;
    let mut lt = from_version(&version);
    if let Some(c) = field("cuda").filter(|c| c != "None" && !c.is_empty()) {
        lt.cuda = Some(c);
    }
    Some(lt)
}

/// "mlperf-run 0.1.0 (libtorch 2.11.0+cu130, CUDA 13.0)".
pub fn framework_string(libtorch: Option<&Libtorch>) -> String {
    let me = format!("mlperf-run {}", env!("CARGO_PKG_VERSION"));
    match libtorch {
        Some(Libtorch {
            version,
            cuda: Some(c),
        }) => format!("{me} (libtorch {version}, CUDA {c})"),
        Some(Libtorch {
            version,
            cuda: None,
        }) => format!("{me} (libtorch {version})"),
        None => me,
    }
}

/// The `other_software_stack` table from what is known.
pub fn software_stack(
    libtorch: Option<&Libtorch>,
    driver: Option<&str>,
    cuda_driver: Option<&str>,
    kernel: Option<&str>,
) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(
        "mlperf_run_version".into(),
        Value::from(env!("CARGO_PKG_VERSION")),
    );
    if let Some(lt) = libtorch {
        m.insert("libtorch_version".into(), Value::from(lt.version.clone()));
        if let Some(c) = &lt.cuda {
            m.insert("cuda_version".into(), Value::from(c.clone()));
        }
    }
    if let Some(d) = cuda_driver {
        m.insert("cuda_driver_version".into(), Value::from(d));
    }
    if let Some(d) = driver {
        m.insert("nvidia_kernel_driver".into(), Value::from(d));
    }
    if let Some(k) = kernel {
        m.insert("kernel_version".into(), Value::from(k));
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torch_version_py_and_framework() {
        let lt = parse_torch_version_py(
            "from typing import Optional\n__version__ = '2.11.0+cu130'\ndebug = False\ncuda: Optional[str] = '13.0'\n",
        )
        .unwrap();
        assert_eq!(
            lt,
            Libtorch {
                version: "2.11.0+cu130".into(),
                cuda: Some("13.0".into())
            }
        );
        assert_eq!(from_version("2.5.1+cu124").cuda.as_deref(), Some("12.4"));
        assert_eq!(from_version("2.5.1+cpu").cuda, None);
        let f = framework_string(Some(&lt));
        assert!(
            f.starts_with("mlperf-run ") && f.ends_with("(libtorch 2.11.0+cu130, CUDA 13.0)"),
            "{f}"
        );
    }
}
