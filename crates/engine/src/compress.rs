//! Compressed capture files: zstd (`.zst`) and gzip (`.gz`), written and read.
//!
//! Writing: the file sink's chunks (2 MiB of pcapng or pcap, cut where a record ends) are each
//! compressed, in the file's I/O thread, into one self-contained piece: a zstd frame (with its
//! content size and checksum) or a gzip member. A file cut short (a full disk, a crash) thus
//! holds whole pieces up to the cut and decompresses to whole records; zstd also gives the
//! 128 KiB blocks of the piece the cut went through. Both formats allow pieces one after the
//! other, and `zstd -d`, `gzip -d` and Wireshark read them as one stream.
//!
//! Reading: a compressed input is known by its first bytes, not its name, and is decompressed
//! (stopping at the first damage, keeping what came before) into an unnamed temporary file,
//! which is then read as an uncompressed file is.

use std::io::{self, Read, Write};
use std::path::Path;

use tapflow_sys::direct::ChunkEncoder;

/// A compression format of capture files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    /// Zstandard (RFC 8878), level [`ZSTD_LEVEL`].
    Zstd,
    /// gzip (RFC 1952), level [`GZIP_LEVEL`].
    Gzip,
}

/// zstd's own default level: on header records, 375 MB/s of input on one core of the 2-vCPU
/// machine of docs/benchmarks.md, 4.4 times smaller (level 1: 490 MB/s, 4.15 times).
pub const ZSTD_LEVEL: i32 = 3;

/// gzip level 1: 166 MB/s, 3.1 times smaller; the default level 6 takes 15 MB/s there, too slow
/// for a live capture.
pub const GZIP_LEVEL: u32 = 1;

const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

impl Codec {
    /// The format an output path asks for by its last extension (`.zst`, `.zstd`, `.gz`).
    pub fn for_path(path: &Path) -> Option<Codec> {
        match path.extension()?.to_str()? {
            "zst" | "zstd" => Some(Codec::Zstd),
            "gz" => Some(Codec::Gzip),
            _ => None,
        }
    }

    /// The format of a file that starts with `bytes`, if it is compressed.
    pub fn sniff(bytes: &[u8]) -> Option<Codec> {
        if bytes.starts_with(&ZSTD_MAGIC) {
            Some(Codec::Zstd)
        } else if bytes.starts_with(&GZIP_MAGIC) {
            Some(Codec::Gzip)
        } else {
            None
        }
    }

    /// The name users know the format by.
    pub fn name(self) -> &'static str {
        match self {
            Codec::Zstd => "zstd",
            Codec::Gzip => "gzip",
        }
    }

    /// An encoder turning each chunk into one piece of this format.
    pub fn encoder(self) -> io::Result<Box<dyn ChunkEncoder>> {
        Ok(match self {
            Codec::Zstd => {
                let mut c = zstd::bulk::Compressor::new(ZSTD_LEVEL)?;
                c.include_checksum(true)?;
                c.include_contentsize(true)?;
                Box::new(ZstdFrames(c, Vec::new()))
            }
            Codec::Gzip => Box::new(GzipMembers),
        })
    }

    /// Decompresses all of `input` into `out`, up to the first damage or the end of a stream
    /// cut short; at most `limit` bytes. Returns the bytes written and what stopped the
    /// decoder before the end, if anything did.
    pub fn decompress(
        self,
        input: &[u8],
        out: &mut dyn Write,
        limit: u64,
    ) -> io::Result<(u64, Option<io::Error>)> {
        let mut reader: Box<dyn Read> = match self {
            Codec::Zstd => Box::new(zstd::stream::read::Decoder::with_buffer(input)?),
            Codec::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(input)),
        };
        let mut buf = vec![0u8; 256 << 10];
        let mut done = 0u64;
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => return Ok((done, None)),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Ok((done, Some(e))),
            };
            let n = n.min(usize::try_from(limit - done).unwrap_or(usize::MAX));
            out.write_all(&buf[..n])?;
            done += n as u64;
            if done == limit {
                return Ok((done, Some(io::Error::other("the decompressed size limit"))));
            }
        }
    }

    /// The whole pieces (zstd frames, gzip members) at the start of `input`: their
    /// decompressed bytes, and where the last one ends in `input`. What follows them, if
    /// anything, is damaged or cut short.
    pub fn whole_pieces(self, input: &[u8]) -> (Vec<u8>, usize) {
        let mut out = Vec::new();
        let mut end = 0;
        while end < input.len() {
            let rest = &input[end..];
            let len = match self {
                Codec::Zstd => match zstd::zstd_safe::find_frame_compressed_size(rest) {
                    Ok(n) if n <= rest.len() => n,
                    _ => break,
                },
                Codec::Gzip => {
                    let mut d = flate2::bufread::GzDecoder::new(rest);
                    let mut piece = Vec::new();
                    if d.read_to_end(&mut piece).is_err() {
                        break;
                    }
                    let left = d.into_inner().len();
                    out.extend_from_slice(&piece);
                    end += rest.len() - left;
                    continue;
                }
            };
            if zstd::stream::copy_decode(&rest[..len], &mut out).is_err() {
                break;
            }
            end += len;
        }
        (out, end)
    }
}

/// Each chunk as one zstd frame, made in a buffer of its own (zstd writes a `Vec` from its
/// start).
struct ZstdFrames(zstd::bulk::Compressor<'static>, Vec<u8>);

impl ChunkEncoder for ZstdFrames {
    fn encode(&mut self, chunk: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        let frame = &mut self.1;
        frame.clear();
        frame.reserve(zstd::zstd_safe::compress_bound(chunk.len()));
        self.0.compress_to_buffer(chunk, frame)?;
        out.extend_from_slice(frame);
        Ok(())
    }
}

/// Each chunk as one gzip member.
struct GzipMembers;

impl ChunkEncoder for GzipMembers {
    fn encode(&mut self, chunk: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        let mut e = flate2::write::GzEncoder::new(out, flate2::Compression::new(GZIP_LEVEL));
        e.write_all(chunk)?;
        e.finish()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(codec: Codec, chunks: &[&[u8]]) -> Vec<u8> {
        let mut e = codec.encoder().unwrap();
        let mut out = Vec::new();
        for c in chunks {
            e.encode(c, &mut out).unwrap();
        }
        out
    }

    #[test]
    fn pieces_read_back_as_one_stream_and_a_cut_keeps_the_whole_ones() {
        let a: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let b: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 253) as u8).collect();
        for codec in [Codec::Zstd, Codec::Gzip] {
            let file = pieces(codec, &[&a, &b]);
            assert_eq!(Codec::sniff(&file), Some(codec));
            let mut out = Vec::new();
            let (n, err) = codec.decompress(&file, &mut out, u64::MAX).unwrap();
            assert!(err.is_none(), "{codec:?}: {err:?}");
            assert_eq!(n as usize, a.len() + b.len());
            assert_eq!(out[..a.len()], a[..]);
            assert_eq!(out[a.len()..], b[..]);

            let first = pieces(codec, &[&a]).len();
            let (whole, end) = codec.whole_pieces(&file);
            assert_eq!((whole.len(), end), (a.len() + b.len(), file.len()));
            // Cut inside the second piece: the first is whole, and the decoder gives at least
            // all of it before it stops.
            let cut = &file[..first + (file.len() - first) / 2];
            let (whole, end) = codec.whole_pieces(cut);
            assert_eq!((whole, end), (a.clone(), first), "{codec:?}");
            let mut out = Vec::new();
            let (n, err) = codec.decompress(cut, &mut out, u64::MAX).unwrap();
            assert!(err.is_some(), "{codec:?}");
            assert!(n as usize >= a.len() && out[..a.len()] == a[..], "{codec:?}");
            // A limit stops it.
            let (n, err) = codec.decompress(&file, &mut Vec::new(), 1000).unwrap();
            assert_eq!(n, 1000);
            assert!(err.is_some());
        }
    }

    #[test]
    fn formats_come_from_names_and_magic() {
        assert_eq!(Codec::for_path(Path::new("t.pcapng.zst")), Some(Codec::Zstd));
        assert_eq!(Codec::for_path(Path::new("t.pcap.gz")), Some(Codec::Gzip));
        assert_eq!(Codec::for_path(Path::new("t.pcapng")), None);
        assert_eq!(Codec::sniff(&[0x0a, 0x0d, 0x0d, 0x0a]), None);
        assert_eq!(Codec::sniff(&[]), None);
    }
}
