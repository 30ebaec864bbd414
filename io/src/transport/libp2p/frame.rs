//! The request-response codec for direct messages: a request is one frame holding one encoded
//! message, the response is an empty frame (an ack). A frame is an unsigned-varint length
//! followed by that many bytes; a declared length over 64 KiB is refused before any body byte is
//! read.
//!
//! A refused frame is still a request (a [`Frame::Refused`]) rather than a read error:
//! libp2p's request-response only logs read errors, and the transport must count them.

use std::io;

use chorus_core::codec::MAX_MESSAGE_BYTES;
use futures::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use libp2p::StreamProtocol;

/// The protocol id direct messages are negotiated under.
pub const DIRECT_PROTOCOL: StreamProtocol = StreamProtocol::new("/chorus/direct/1.0.0");

/// Longest unsigned varint accepted (a `u64` takes at most 10 bytes).
const MAX_VARINT_BYTES: usize = 10;

/// The codec of [`DIRECT_PROTOCOL`]. Requests are [`Frame`]s (the bytes are decoded by the
/// caller with [`chorus_core::codec::decode`]); responses carry nothing.
///
/// Public so that tests and other tools can speak the raw protocol.
#[derive(Clone, Copy, Debug, Default)]
pub struct FrameCodec;

/// One request of the direct-message protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// The frame's bytes: one encoded message, at most 64 KiB. The only kind that is sent.
    Bytes(Vec<u8>),
    /// A frame the reader refused without reading its body.
    Refused(FrameError),
}

/// Why a frame was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The declared length is over [`MAX_MESSAGE_BYTES`].
    #[error("frame of {0} bytes exceeds the {MAX_MESSAGE_BYTES}-byte limit")]
    TooLarge(u64),
    /// The length prefix is not a valid unsigned varint.
    #[error("invalid frame length prefix")]
    BadLength,
}

impl FrameError {
    /// The rejection label, matching [`chorus_core::codec::CodecError::kind`].
    pub fn kind(&self) -> &'static str {
        match self {
            FrameError::TooLarge(_) => "too_large",
            FrameError::BadLength => "malformed",
        }
    }
}

impl libp2p::request_response::Codec for FrameCodec {
    type Protocol = StreamProtocol;
    type Request = Frame;
    type Response = ();

    async fn read_request<T>(&mut self, _: &StreamProtocol, io: &mut T) -> io::Result<Frame>
    where
        T: AsyncRead + Unpin + Send,
    {
        read_frame(io).await
    }

    async fn read_response<T>(&mut self, _: &StreamProtocol, io: &mut T) -> io::Result<()>
    where
        T: AsyncRead + Unpin + Send,
    {
        // The ack is an empty frame; anything else in it is ignored, but still bounded.
        match read_frame(io).await? {
            Frame::Bytes(_) => Ok(()),
            Frame::Refused(e) => Err(io::Error::new(io::ErrorKind::InvalidData, e)),
        }
    }

    async fn write_request<T>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
        req: Frame,
    ) -> io::Result<()>
    where
        T: AsyncWrite + Unpin + Send,
    {
        match req {
            Frame::Bytes(bytes) => write_frame(io, &bytes).await,
            Frame::Refused(e) => Err(io::Error::new(io::ErrorKind::InvalidInput, e)),
        }
    }

    async fn write_response<T>(&mut self, _: &StreamProtocol, io: &mut T, _: ()) -> io::Result<()>
    where
        T: AsyncWrite + Unpin + Send,
    {
        write_frame(io, &[]).await
    }
}

/// Reads one frame, refusing a declared length over [`MAX_MESSAGE_BYTES`] before reading it.
pub(super) async fn read_frame<T: AsyncRead + Unpin + Send>(io: &mut T) -> io::Result<Frame> {
    let Some(len) = read_uvarint(io).await? else {
        return Ok(Frame::Refused(FrameError::BadLength));
    };
    if len > MAX_MESSAGE_BYTES as u64 {
        return Ok(Frame::Refused(FrameError::TooLarge(len)));
    }
    // The bound above makes the cast lossless and the allocation at most 64 KiB.
    let mut buf = vec![0; len as usize];
    io.read_exact(&mut buf).await?;
    Ok(Frame::Bytes(buf))
}

async fn write_frame<T: AsyncWrite + Unpin + Send>(io: &mut T, bytes: &[u8]) -> io::Result<()> {
    let mut frame = Vec::new();
    put_frame(&mut frame, bytes);
    io.write_all(&frame).await?;
    io.flush().await
}

/// Appends one frame (varint length, then `bytes`) to `out`. A frame goes to the stream in
/// one write with its length: yamux makes a data frame of every write (12 bytes of header, and
/// noise's 18 when flushed apart), which for a 20-byte heartbeat was most of its cost.
pub(super) fn put_frame(out: &mut Vec<u8>, bytes: &[u8]) {
    let mut prefix = [0u8; MAX_VARINT_BYTES];
    let n = encode_uvarint(bytes.len() as u64, &mut prefix);
    out.reserve(n + bytes.len());
    out.extend_from_slice(&prefix[..n]);
    out.extend_from_slice(bytes);
}

/// Writes `value` as an unsigned LEB128 varint (the multiformats `unsigned-varint`) into `out`,
/// returning the number of bytes used.
fn encode_uvarint(mut value: u64, out: &mut [u8; MAX_VARINT_BYTES]) -> usize {
    let mut i = 0;
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out[i] = byte;
            return i + 1;
        }
        out[i] = byte | 0x80;
        i += 1;
    }
}

/// Reads an unsigned varint; `None` if it runs over 10 bytes (more than a `u64` holds).
async fn read_uvarint<T: AsyncRead + Unpin + Send>(io: &mut T) -> io::Result<Option<u64>> {
    let mut value: u64 = 0;
    for i in 0..MAX_VARINT_BYTES {
        let mut byte = [0u8; 1];
        io.read_exact(&mut byte).await?;
        value |= u64::from(byte[0] & 0x7f) << (7 * i);
        if byte[0] & 0x80 == 0 {
            return Ok(Some(value));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use libp2p::request_response::Codec;

    use super::*;

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a current-thread runtime builds")
            .block_on(f)
    }

    #[test]
    fn frames_round_trip() {
        block_on(async {
            for len in [0usize, 1, 127, 128, 300, MAX_MESSAGE_BYTES] {
                let mut wire = Vec::new();
                let body = vec![7u8; len];
                FrameCodec
                    .write_request(&DIRECT_PROTOCOL, &mut wire, Frame::Bytes(body.clone()))
                    .await
                    .unwrap();
                let mut r = futures::io::Cursor::new(wire);
                let got = FrameCodec
                    .read_request(&DIRECT_PROTOCOL, &mut r)
                    .await
                    .unwrap();
                assert_eq!(got, Frame::Bytes(body));
            }
        });
    }

    #[test]
    fn oversized_frames_are_refused_before_the_body() {
        block_on(async {
            let mut prefix = [0u8; MAX_VARINT_BYTES];
            let n = encode_uvarint(MAX_MESSAGE_BYTES as u64 + 1, &mut prefix);
            // Only the prefix is present: the reader must not wait for the body.
            let mut r = futures::io::Cursor::new(prefix[..n].to_vec());
            let got = FrameCodec
                .read_request(&DIRECT_PROTOCOL, &mut r)
                .await
                .unwrap();
            let too_large = FrameError::TooLarge(MAX_MESSAGE_BYTES as u64 + 1);
            assert_eq!(got, Frame::Refused(too_large));
            assert_eq!(too_large.kind(), "too_large");

            let mut r = futures::io::Cursor::new(vec![0xff; 11]);
            let got = FrameCodec
                .read_request(&DIRECT_PROTOCOL, &mut r)
                .await
                .unwrap();
            assert_eq!(got, Frame::Refused(FrameError::BadLength));
        });
    }
}
