//! The `-f` inputs of the offline subcommands, read as kubectl reads them: files, `-` for
//! standard input, and directories (their `*.yaml`, `*.yml` and `*.json` in name order; their
//! subdirectories too with `-R`).
//!
//! Owns reading only, and names the path in every error; what the documents mean is decided by
//! the subcommands.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Args;

/// The extensions kubectl reads from a directory.
const MANIFEST_EXTENSIONS: [&str; 3] = ["yaml", "yml", "json"];

/// Manifests to read.
#[derive(Debug, Clone, Args)]
pub struct InputArgs {
    /// A manifest file of JSON or (multi-document) YAML, a directory of them (`*.yaml`, `*.yml`,
    /// `*.json`), or `-` for standard input; repeat for more.
    #[arg(
        short = 'f',
        long = "filename",
        value_name = "FILE|DIR|-",
        required = true
    )]
    pub files: Vec<PathBuf>,
    /// Read the directories given with `-f` and their subdirectories.
    #[arg(short = 'R', long, env = "KSVC_WEBHOOK_RECURSIVE")]
    pub recursive: bool,
}

/// One input as read: the name messages give it, and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input {
    pub name: String,
    pub text: String,
}

/// Every input `args` names, in order; a directory's files in name order.
pub fn read_all(args: &InputArgs) -> anyhow::Result<Vec<Input>> {
    let mut inputs = Vec::new();
    for path in &args.files {
        if path.is_dir() {
            let mut files = Vec::new();
            manifests_in(path, args.recursive, &mut files)?;
            if files.is_empty() {
                bail!(
                    "{} holds no *.yaml, *.yml or *.json files{}",
                    path.display(),
                    if args.recursive {
                        ""
                    } else {
                        " (add -R to read its subdirectories)"
                    }
                );
            }
            for file in files {
                inputs.push(read_file(&file)?);
            }
        } else {
            inputs.push(read_path(path)?);
        }
    }
    Ok(inputs)
}

/// The names of `inputs`, for a message.
pub fn names(inputs: &[Input]) -> String {
    let names: Vec<&str> = inputs.iter().map(|i| i.name.as_str()).collect();
    names.join(", ")
}

/// Read one file, or standard input for `-`.
pub fn read_path(path: &Path) -> anyhow::Result<Input> {
    match path == Path::new("-") {
        true => read_stdin(),
        false => read_file(path),
    }
}

fn read_file(path: &Path) -> anyhow::Result<Input> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let name = path.display().to_string();
    let text = String::from_utf8(bytes).map_err(|_| anyhow::anyhow!("{name} is not UTF-8 text"))?;
    Ok(Input { name, text })
}

fn read_stdin() -> anyhow::Result<Input> {
    let mut bytes = Vec::new();
    std::io::stdin()
        .read_to_end(&mut bytes)
        .context("cannot read standard input")?;
    let text = String::from_utf8(bytes)
        .map_err(|_| anyhow::anyhow!("standard input is not UTF-8 text"))?;
    Ok(Input {
        name: "standard input".to_owned(),
        text,
    })
}

/// The manifest files in `dir`, in name order, with its subdirectories' when `recursive` (each at
/// its place in the order, as kubectl walks).
fn manifests_in(dir: &Path, recursive: bool, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    let listing = || format!("cannot list {}", dir.display());
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(listing)?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .with_context(listing)?;
    entries.sort();
    for path in entries {
        if path.is_dir() {
            if recursive {
                manifests_in(&path, recursive, out)?;
            }
        } else if path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| MANIFEST_EXTENSIONS.contains(&e))
        {
            out.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_is_read_as_kubectl_reads_it() {
        let dir = tempfile::tempdir().unwrap();
        let put = |rel: &str, text: &str| {
            let path = dir.path().join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        put("b.yaml", "b");
        put("a.json", "a");
        put("c.yml", "c");
        put("notes.txt", "skipped");
        put("sub/d.yaml", "d");
        let read = |recursive| {
            let args = InputArgs {
                files: vec![dir.path().to_owned()],
                recursive,
            };
            read_all(&args)
                .unwrap()
                .into_iter()
                .map(|i| i.text)
                .collect::<Vec<_>>()
        };
        assert_eq!(read(false), ["a", "b", "c"]);
        assert_eq!(read(true), ["a", "b", "c", "d"]);
        let empty = tempfile::tempdir().unwrap();
        let args = InputArgs {
            files: vec![empty.path().to_owned()],
            recursive: false,
        };
        let err = read_all(&args).unwrap_err().to_string();
        assert!(
            err.contains("holds no *.yaml, *.yml or *.json files"),
            "{err}"
        );
    }
}
