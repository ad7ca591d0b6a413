//! What the fuzz targets of this crate's parsers share (`http_fuzz.rs`, `control_fuzz.rs`): a
//! committed corpus of text files and the mutations of its seeds.
//!
//! A corpus file is text: `#` lines are comments (the `# expect: OUTCOME` one gives the expected
//! outcome), the rest is the input with the file's own line ends dropped and `\r`, `\n`, `\t`,
//! `\\` and `\xNN` escapes standing for their bytes.

use bolero::generator::TypeGenerator;
use std::path::{Path, PathBuf};

/// `crates/daemon/corpus/<name>`.
pub fn corpus_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(name)
}

/// Reads a corpus file (format in the module docs): the input and its expected outcome.
pub fn from_corpus_file(text: &str) -> (Vec<u8>, Option<String>) {
    let mut expect = None;
    let mut out = Vec::new();
    for line in text.lines() {
        if let Some(comment) = line.strip_prefix('#') {
            if let Some(e) = comment.trim().strip_prefix("expect:") {
                expect = expect.or(Some(e.trim().to_string()));
            }
            continue;
        }
        let mut bytes = line.bytes();
        while let Some(b) = bytes.next() {
            if b != b'\\' {
                out.push(b);
                continue;
            }
            match bytes.next() {
                Some(b'r') => out.push(b'\r'),
                Some(b'n') => out.push(b'\n'),
                Some(b't') => out.push(b'\t'),
                Some(b'\\') => out.push(b'\\'),
                Some(b'x') => {
                    let hex = [bytes.next().unwrap_or(0), bytes.next().unwrap_or(0)];
                    let hex = std::str::from_utf8(&hex).expect("ASCII hex digits");
                    out.push(u8::from_str_radix(hex, 16).expect("two hex digits after \\x"));
                }
                other => panic!("unknown escape \\{other:?} in {line:?}"),
            }
        }
    }
    (out, expect)
}

/// Every `*.txt` of the corpus `name`, in name order: path, input, expectation.
pub fn read_corpus(name: &str) -> Vec<(PathBuf, Vec<u8>, Option<String>)> {
    let mut files: Vec<_> = std::fs::read_dir(corpus_dir(name))
        .expect("corpus directory")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let (input, expect) = from_corpus_file(&std::fs::read_to_string(&path).unwrap());
            (path, input, expect)
        })
        .collect()
}

/// The non-empty inputs of the corpus `name`: the seeds [`SeedMutation`] mutates.
pub fn seeds(name: &str) -> Vec<Vec<u8>> {
    read_corpus(name)
        .into_iter()
        .map(|(_, input, _)| input)
        .filter(|i| !i.is_empty())
        .collect()
}

/// A mutation of one committed corpus input.
#[derive(Clone, Debug, TypeGenerator)]
pub struct SeedMutation {
    seed: u16,
    #[generator(bolero::produce::<Vec<(u16, u8)>>().with().len(0..6usize))]
    flips: Vec<(u16, u8)>,
    #[generator(bolero::produce::<Vec<(u16, u8)>>().with().len(0..4usize))]
    inserts: Vec<(u16, u8)>,
    /// Below 0x4000 (one time in four): truncate to `truncate % (len + 1)` bytes.
    truncate: u16,
}

impl SeedMutation {
    /// One of `seeds` (none empty) with random byte flips, insertions and a truncation.
    pub fn apply(&self, seeds: &[Vec<u8>]) -> Vec<u8> {
        let mut input = seeds[usize::from(self.seed) % seeds.len()].clone();
        for &(at, xor) in &self.flips {
            let len = input.len();
            input[usize::from(at) % len] ^= xor;
        }
        for &(at, byte) in &self.inserts {
            let at = usize::from(at) % (input.len() + 1);
            input.insert(at, byte);
        }
        if self.truncate < 0x4000 {
            input.truncate(usize::from(self.truncate) % (input.len() + 1));
        }
        input
    }
}
