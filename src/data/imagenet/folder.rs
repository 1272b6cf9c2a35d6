//! The ImageFolder layout used by torchvision and MosaicML: `ROOT/<class>/<image>.JPEG`.
//!
//! Classes are the subdirectories sorted by name (as torchvision's `find_classes` does) and
//! numbered from 0; images are the files ending in .jpg/.jpeg (any case) inside each class,
//! sorted by name. An ImageNet root holds `train/` and `val/` in this layout.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// One labelled image file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    pub path: PathBuf,
    pub label: i64,
}

/// A listed ImageFolder: its classes (sorted) and samples (by class, then file name).
#[derive(Clone, Debug)]
pub struct ImageFolder {
    pub root: PathBuf,
    pub classes: Vec<String>,
    pub samples: Vec<Sample>,
}

/// True for the extensions this reader accepts: .jpg and .jpeg in any case (ImageNet uses .JPEG).
pub fn is_jpeg_name(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("jpg") || e.eq_ignore_ascii_case("jpeg"))
}

impl ImageFolder {
    /// List `root`: every subdirectory is a class; every JPEG file in it a sample.
    /// Errors name the directory when it is missing, has no class directories, or a class
    /// directory holds no JPEG files.
    pub fn open(root: &Path) -> Result<ImageFolder> {
        if !root.is_dir() {
            bail!(
                "image folder {} does not exist or is not a directory (expected <class>/<image>.JPEG inside; \
                 make one from the ILSVRC2012 tars with `mlperf-run data prepare-imagenet`, or a \
                 synthetic one with `mlperf-run data synth-imagenet --out DIR`)",
                root.display()
            );
        }
        let mut classes = Vec::new();
        for entry in
            std::fs::read_dir(root).with_context(|| format!("cannot list {}", root.display()))?
        {
            let entry = entry.with_context(|| format!("cannot list {}", root.display()))?;
            let is_dir =
                entry.file_type().map(|t| t.is_dir()).unwrap_or(false) || entry.path().is_dir();
            if is_dir {
                match entry.file_name().into_string() {
                    Ok(name) if !name.starts_with('.') => classes.push(name),
                    Ok(_) => {}
                    Err(name) => bail!(
                        "class directory {} in {} has a name that is not UTF-8; rename it",
                        Path::new(&name).display(),
                        root.display()
                    ),
                }
            }
        }
        if classes.is_empty() {
            bail!(
                "image folder {} has no class subdirectories: put its images in it as \
                 <class>/<image>.JPEG, one folder per class (train/ and val/ with the same \
                 classes), or make a set with `mlperf-run data synth-imagenet --out DIR`",
                root.display()
            );
        }
        classes.sort();
        let mut samples = Vec::new();
        for (label, class) in classes.iter().enumerate() {
            let dir = root.join(class);
            let mut files = Vec::new();
            for entry in
                std::fs::read_dir(&dir).with_context(|| format!("cannot list {}", dir.display()))?
            {
                let path = entry
                    .with_context(|| format!("cannot list {}", dir.display()))?
                    .path();
                if is_jpeg_name(&path) && path.is_file() {
                    files.push(path);
                }
            }
            if files.is_empty() {
                bail!(
                    "class directory {} holds no .JPEG/.jpeg/.jpg files; remove it or add images",
                    dir.display()
                );
            }
            files.sort();
            samples.extend(files.into_iter().map(|path| Sample {
                path,
                label: label as i64,
            }));
        }
        Ok(ImageFolder {
            root: root.to_path_buf(),
            classes,
            samples,
        })
    }

    pub fn len(&self) -> usize {
        self.samples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }
}

/// An ImageNet-style root: `train/` and `val/` ImageFolders with the same classes.
#[derive(Clone, Debug)]
pub struct ImagenetDir {
    pub train: ImageFolder,
    pub val: ImageFolder,
}

impl ImagenetDir {
    /// Open `root/train` and `root/val`; their class lists must match.
    pub fn open(root: &Path) -> Result<ImagenetDir> {
        if !root.is_dir() {
            bail!(
                "ImageNet directory {} does not exist (expected train/ and val/ inside)",
                root.display()
            );
        }
        let train = ImageFolder::open(&root.join("train"))?;
        let val = ImageFolder::open(&root.join("val"))?;
        if train.classes != val.classes {
            let only_train: Vec<&String> = train
                .classes
                .iter()
                .filter(|c| !val.classes.contains(c))
                .take(3)
                .collect();
            let only_val: Vec<&String> = val
                .classes
                .iter()
                .filter(|c| !train.classes.contains(c))
                .take(3)
                .collect();
            bail!(
                "{}: train/ has {} classes and val/ has {}; they must be the same (only in train: {:?}, only in val: {:?})",
                root.display(),
                train.classes.len(),
                val.classes.len(),
                only_train,
                only_val
            );
        }
        Ok(ImagenetDir { train, val })
    }

    pub fn num_classes(&self) -> usize {
        self.train.classes.len()
    }
}
