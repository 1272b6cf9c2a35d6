//! The ImageFolder layout used by torchvision and MosaicML: `ROOT/<class>/<image>.JPEG`.
//!
//! Classes are the subdirectories sorted by name (as torchvision's `find_classes` does) and
//! numbered from 0; images are the files ending in .jpg/.jpeg (any case) inside each class,
//! sorted by name. An ImageNet root holds `train/` and `val/` in this layout.

use anyhow::{bail, Result};
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

/// Whether a file or folder name is hidden (`.DS_Store`, macOS's `._NAME` copies, a
/// `.NAME.tmp-PID` being written): never a class or an image.
fn is_hidden(name: &std::ffi::OsStr) -> bool {
    name.as_encoded_bytes().starts_with(b".")
}

/// The JPEG files directly in `dir`, sorted (how [`ImageFolder::open`] lists a class).
/// A name this reader takes (`*.JPEG`) must be a regular file, following links: a link that
/// leads nowhere or round a loop, a folder, a FIFO, socket or device of such a name is refused by
/// name (it used to be passed over without a word, so the class trained on fewer images than
/// its folder shows). Hidden names are passed over.
fn jpeg_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| list_error(dir, &e))? {
        let entry = entry.map_err(|e| list_error(dir, &e))?;
        let path = entry.path();
        if is_hidden(&entry.file_name()) || !is_jpeg_name(&path) {
            continue;
        }
        let meta = std::fs::metadata(&path).map_err(|e| crate::util::tree::io_error(&path, &e))?;
        if !meta.is_file() {
            bail!(
                "{} is {}, not an image file: remove it or put the image in its place",
                path.display(),
                crate::util::tree::kind_of(&meta.file_type())
            );
        }
        files.push(path);
    }
    files.sort();
    Ok(files)
}

/// A folder that cannot be listed, named with what to do.
fn list_error(dir: &Path, e: &std::io::Error) -> anyhow::Error {
    let d = dir.display();
    match e.kind() {
        std::io::ErrorKind::PermissionDenied => {
            anyhow::anyhow!("cannot list {d}: permission denied: make it readable (chmod a+rx {d})")
        }
        _ => anyhow::anyhow!("cannot list {d}: {e}"),
    }
}

/// Why a class folder without images has none, when the images sit one level down
/// (`train/n01440764/n01440764/*.JPEG`, a class tar extracted into a folder of its name): the
/// hint that says so, else nothing.
fn nested_images_hint(dir: &Path) -> Option<String> {
    let sub = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| !is_hidden(&e.file_name()) && e.path().is_dir())
        .find(|e| {
            std::fs::read_dir(e.path()).is_ok_and(|mut rd| {
                rd.any(|f| f.is_ok_and(|f| is_jpeg_name(&f.path()) && f.path().is_file()))
            })
        })?;
    Some(format!(
        " (its subfolder {} holds images: images lie directly in their class folder, \
         ROOT/<class>/<image>.JPEG; move them up one level)",
        sub.path().display()
    ))
}

/// The `.JPEG` files directly in `root` (for a folder without class folders: the flat layout of
/// ILSVRC2012_img_val.tar).
fn loose_images(root: &Path) -> usize {
    std::fs::read_dir(root).map_or(0, |rd| {
        rd.filter_map(|e| e.ok())
            .filter(|e| !is_hidden(&e.file_name()) && is_jpeg_name(&e.path()))
            .count()
    })
}

impl ImageFolder {
    /// List `root`: every subdirectory is a class; every JPEG file in it a sample; hidden
    /// names are passed over. Errors name the directory when it is missing, has no class
    /// directories, or a class directory holds no JPEG files; and the entry when a class is a
    /// link that leads nowhere, or an image name is not a regular file.
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
        for entry in std::fs::read_dir(root).map_err(|e| list_error(root, &e))? {
            let entry = entry.map_err(|e| list_error(root, &e))?;
            if is_hidden(&entry.file_name()) {
                continue;
            }
            let is_link = entry.file_type().map(|t| t.is_symlink()).unwrap_or(false);
            let is_dir = match std::fs::metadata(entry.path()) {
                Ok(meta) => meta.is_dir(),
                // a link that leads nowhere (or round a loop) may be a class whose folder is
                // gone: refused by name rather than passed over, which would drop the class
                Err(e) if is_link => bail!(
                    "{} (a link in an image folder stands for a class folder)",
                    crate::util::tree::io_error(&entry.path(), &e)
                ),
                Err(_) => false,
            };
            if is_dir {
                match entry.file_name().into_string() {
                    Ok(name) => classes.push(name),
                    Err(name) => bail!(
                        "class directory {} in {} has a name that is not UTF-8; rename it",
                        Path::new(&name).display(),
                        root.display()
                    ),
                }
            }
        }
        if classes.is_empty() {
            let loose = loose_images(root);
            if loose > 0 {
                bail!(
                    "image folder {} holds {loose} .JPEG files but no class subdirectories: its \
                     images must lie in one folder per class, <class>/<image>.JPEG. Val images \
                     as extracted from ILSVRC2012_img_val.tar are sorted into classes by \
                     `mlperf-run data prepare-imagenet` (with --val-labels)",
                    root.display()
                );
            }
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
            let files = jpeg_files(&dir)?;
            if files.is_empty() {
                bail!(
                    "class directory {} holds no .JPEG/.jpeg/.jpg files{}; remove it or add images",
                    dir.display(),
                    nested_images_hint(&dir).unwrap_or_default()
                );
            }
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
            let what = match root.exists() {
                true => "is not a directory",
                false => "does not exist",
            };
            bail!(
                "ImageNet directory {} {what} (expected train/ and val/ inside)",
                root.display()
            );
        }
        let train_dir = root.join("train");
        if !train_dir.exists() && ImageFolder::open(root).is_ok() {
            // --data DIR/train (or DIR/val): a folder of classes itself
            bail!(
                "{} has no train/ folder, but is a folder of classes itself: give --data the \
                 folder that holds train/ and val/ (its parent {}?)",
                root.display(),
                crate::util::fs::parent_dir(root).display()
            );
        }
        let train = ImageFolder::open(&train_dir)?;
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
