//! Compressed capture files: zstd (`.zst`) and gzip (`.gz`), written and read.
//!
//! Writing: the file sink's chunks (2 MiB of pcapng or pcap, cut where a record ends) are
//! compressed in the file's I/O thread. zstd: one frame for the file, flushed at the end of
//! every chunk, so that each chunk ends a zstd block and decodes without what follows (one
//! frame, not one per chunk: Wireshark 4.0, Debian 12's, stops reading at the end of a file's
//! first zstd frame). gzip: one member per chunk (read as one stream by `gzip -d`, zlib and
//! Wireshark). A file cut short (a full disk, a crash) decompresses up to its last whole zstd
//! block (at most 128 KiB of records before the cut) or gzip member; a full disk's file is cut
//! back to its last whole record and closed ([`Codec::pieces`], [`Codec::seal`]).
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

    /// An encoder for a file of this format, chunk by chunk.
    pub fn encoder(self) -> io::Result<Box<dyn ChunkEncoder>> {
        Ok(match self {
            Codec::Zstd => Box::new(ZstdStream(Some(zstd::stream::write::Encoder::new(
                Vec::new(),
                ZSTD_LEVEL,
            )?))),
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

    /// The pieces at the start of `input` that decode on their own (zstd blocks, gzip
    /// members): all they decode to, and where each ends in `input` with how many decoded
    /// bytes come before that. What follows the last is damaged or cut short.
    pub fn pieces(self, input: &[u8]) -> Pieces {
        let mut p = Pieces::default();
        match self {
            Codec::Zstd => {
                let _ = zstd_blocks(input, &mut p);
            }
            Codec::Gzip => {
                let mut end = 0;
                while end < input.len() {
                    let rest = &input[end..];
                    let mut d = flate2::bufread::GzDecoder::new(rest);
                    let at = p.decoded.len();
                    if d.read_to_end(&mut p.decoded).is_err() {
                        p.decoded.truncate(at);
                        break;
                    }
                    end += rest.len() - d.into_inner().len();
                    p.ends.push((end, p.decoded.len()));
                }
            }
        }
        p
    }

    /// What makes a stream cut after one of its [`pieces`](Codec::pieces) whole: for zstd an
    /// empty last block (the frame has no checksum), for gzip nothing.
    pub fn seal(self) -> &'static [u8] {
        match self {
            // Block header: last block, raw, 0 bytes.
            Codec::Zstd => &[1, 0, 0],
            Codec::Gzip => &[],
        }
    }
}

/// What [`Codec::pieces`] found.
#[derive(Debug, Default)]
pub struct Pieces {
    /// The decoded bytes of all pieces.
    pub decoded: Vec<u8>,
    /// For each piece: where it ends in the input, and the decoded length up to there.
    pub ends: Vec<(usize, usize)>,
}

/// Walks the blocks of the zstd frame at the start of `input`, decoding each one whole.
fn zstd_blocks(input: &[u8], p: &mut Pieces) -> Option<()> {
    if Codec::sniff(input) != Some(Codec::Zstd) {
        return None;
    }
    // RFC 8878 §3.1.1.1: the frame header's length from its descriptor.
    let fhd = *input.get(4)?;
    let single = (fhd >> 5) & 1;
    let fcs = match fhd >> 6 {
        0 => usize::from(single),
        1 => 2,
        2 => 4,
        _ => 8,
    };
    let did = [0, 1, 2, 4][usize::from(fhd & 3)];
    let mut at = 5 + usize::from(single == 0) + did + fcs;
    let mut d = zstd::stream::raw::Decoder::new().ok()?;
    let mut out = vec![0u8; 256 << 10];
    loop {
        let h = input.get(at..at + 3)?;
        let h = u32::from(h[0]) | u32::from(h[1]) << 8 | u32::from(h[2]) << 16;
        let size = (h >> 3) as usize;
        let stored = match (h >> 1) & 3 {
            0 | 2 => size,
            1 => 1,
            _ => return None,
        };
        let end = at + 3 + stored;
        // The decoder gets the frame header with the first block.
        let block = input.get(p.ends.last().map_or(0, |e| e.0)..end)?;
        // The whole block is there: it decodes whole, in a few calls at most.
        let mut fed = 0;
        loop {
            use zstd::stream::raw::Operation;
            let s = d.run_on_buffers(&block[fed..], &mut out).ok()?;
            fed += s.bytes_read;
            p.decoded.extend_from_slice(&out[..s.bytes_written]);
            if fed == block.len() && s.bytes_written < out.len() {
                break;
            }
        }
        at = end;
        p.ends.push((at, p.decoded.len()));
        if h & 1 == 1 {
            return Some(());
        }
    }
}

/// The file as one zstd frame, flushed at the end of each chunk.
struct ZstdStream(Option<zstd::stream::write::Encoder<'static, Vec<u8>>>);

impl ChunkEncoder for ZstdStream {
    fn encode(&mut self, chunk: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        let e = self
            .0
            .as_mut()
            .ok_or_else(|| io::Error::other("zstd stream finished"))?;
        e.write_all(chunk)?;
        e.flush()?;
        out.append(e.get_mut());
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        if let Some(e) = self.0.take() {
            out.append(&mut e.finish()?);
        }
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

    fn encode(codec: Codec, chunks: &[&[u8]]) -> (Vec<u8>, Vec<usize>) {
        let mut e = codec.encoder().unwrap();
        let mut out = Vec::new();
        let mut ends = Vec::new();
        for c in chunks {
            e.encode(c, &mut out).unwrap();
            ends.push(out.len());
        }
        e.finish(&mut out).unwrap();
        (out, ends)
    }

    #[test]
    fn chunks_read_back_as_one_stream_and_a_cut_keeps_the_whole_pieces() {
        let a: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let b: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 253) as u8).collect();
        for codec in [Codec::Zstd, Codec::Gzip] {
            let (file, ends) = encode(codec, &[&a, &b]);
            assert_eq!(Codec::sniff(&file), Some(codec));
            let mut out = Vec::new();
            let (n, err) = codec.decompress(&file, &mut out, u64::MAX).unwrap();
            assert!(err.is_none(), "{codec:?}: {err:?}");
            assert_eq!(n as usize, a.len() + b.len());
            assert_eq!(out[..a.len()], a[..]);
            assert_eq!(out[a.len()..], b[..]);

            let p = codec.pieces(&file);
            assert_eq!(p.decoded.len(), a.len() + b.len(), "{codec:?}");
            assert_eq!(p.ends.last().unwrap().0, file.len(), "{codec:?}");
            // The end of the first chunk is the end of a piece.
            assert!(
                p.ends.contains(&(ends[0], a.len())),
                "{codec:?}: {:?}",
                p.ends
            );
            // Cut inside the second chunk: the first decodes whole, before the error.
            let cut = &file[..ends[0] + (ends[1] - ends[0]) / 2];
            let mut out = Vec::new();
            let (n, err) = codec.decompress(cut, &mut out, u64::MAX).unwrap();
            assert!(err.is_some(), "{codec:?}");
            assert!(
                n as usize >= a.len() && out[..a.len()] == a[..],
                "{codec:?}"
            );
            // Cut back to the first chunk and sealed, it is a whole stream again.
            let mut sealed = file[..ends[0]].to_vec();
            sealed.extend_from_slice(codec.seal());
            let mut out = Vec::new();
            let (_, err) = codec.decompress(&sealed, &mut out, u64::MAX).unwrap();
            assert!(err.is_none(), "{codec:?}: {err:?}");
            assert_eq!(out, a, "{codec:?}");
            // A limit stops it.
            let (n, err) = codec.decompress(&file, &mut Vec::new(), 1000).unwrap();
            assert_eq!(n, 1000);
            assert!(err.is_some());
        }
    }

    #[test]
    fn formats_come_from_names_and_magic() {
        assert_eq!(
            Codec::for_path(Path::new("t.pcapng.zst")),
            Some(Codec::Zstd)
        );
        assert_eq!(Codec::for_path(Path::new("t.pcap.gz")), Some(Codec::Gzip));
        assert_eq!(Codec::for_path(Path::new("t.pcapng")), None);
        assert_eq!(Codec::sniff(&[0x0a, 0x0d, 0x0d, 0x0a]), None);
        assert_eq!(Codec::sniff(&[]), None);
    }
}
