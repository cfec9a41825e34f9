//! The protobuf codec of every `authz.v1` service and client (`build.rs` names it to
//! tonic-prost-build in place of `tonic_prost::ProstCodec`).
//!
//! It differs from tonic-prost's codec in one thing: a message is decoded from the contiguous
//! bytes tonic has buffered for it (`&[u8]`) instead of through tonic's `DecodeBuf`. prost reads
//! a message one varint and one string at a time, and each read through `DecodeBuf` re-slices
//! its window and advances the `BytesMut` underneath, where on a slice it is a pointer bump.
//! `callgrind` put decoding at more than half the instructions of a `BatchAuthorize` item
//! before this. Messages and errors are otherwise exactly tonic-prost's: the same prost code
//! decodes the same bytes, and a decode error is `INTERNAL` with prost's message (which
//! `api::error` turns into `INVALID_ARGUMENT` for callers).

use std::marker::PhantomData;

use prost::bytes::Buf;
use prost::Message;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::Status;

/// `application/grpc+proto` with prost messages, decoded from contiguous bytes.
#[derive(Debug, Clone, Copy)]
pub struct SliceCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for SliceCodec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T, U> Codec for SliceCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = SliceEncoder<T>;
    type Decoder = SliceDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        SliceEncoder(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        SliceDecoder(PhantomData)
    }
}

/// Encodes as tonic-prost does: straight into tonic's buffer, which grows as needed.
#[derive(Debug)]
pub struct SliceEncoder<T>(PhantomData<T>);

impl<T: Message> Encoder for SliceEncoder<T> {
    type Item = T;
    type Error = Status;

    fn encode(&mut self, item: T, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.encode(buf)
            .map_err(|e| Status::internal(format!("cannot encode the message: {e}")))
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}

#[derive(Debug)]
pub struct SliceDecoder<U>(PhantomData<U>);

impl<U: Message + Default> Decoder for SliceDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        let len = buf.remaining();
        // tonic buffers a whole message in one `BytesMut`, so its first chunk is all of it; if
        // that ever stops being so, decode through the buffer as tonic-prost does.
        let decoded = if buf.chunk().len() == len {
            let message = U::decode(buf.chunk());
            buf.advance(len);
            message
        } else {
            U::decode(&mut *buf)
        };
        decoded
            .map(Some)
            .map_err(|e| Status::internal(e.to_string()))
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}

/// tonic's default codec buffer.
pub const DEFAULT_BUFFER_SIZE: usize = 8 * 1024;
/// tonic's default yield threshold (`BufferSettings` has no getters to keep it from).
const DEFAULT_YIELD_THRESHOLD: usize = 32 * 1024;

fn buffer_settings(buffer_size: usize) -> BufferSettings {
    BufferSettings::new(buffer_size, DEFAULT_YIELD_THRESHOLD)
}

/// A message that writes its own protobuf encoding (the Authorize answers, encoded straight
/// from cached decisions instead of through prost's owned types).
pub trait WireEncode {
    /// The buffer tonic encodes into, allocated per response: big enough that a typical
    /// message does not grow it.
    const BUFFER_SIZE: usize = DEFAULT_BUFFER_SIZE;

    /// Exactly the bytes [`Self::encode_wire`] writes.
    fn encoded_len(&self) -> usize;
    fn encode_wire(&self, buf: &mut impl prost::bytes::BufMut);
}

/// A request read as its bytes.
pub trait WireDecode: From<prost::bytes::Bytes> {
    /// The buffer tonic gathers the request's frames into, allocated per request: big enough
    /// that a typical message does not grow it (each growth copies what arrived so far).
    const BUFFER_SIZE: usize = DEFAULT_BUFFER_SIZE;
}

/// The codec of `Authorize` and `BatchAuthorize` (`build.rs`): the request arrives as its
/// bytes, untouched (`U: From<Bytes>`, parsed by the handler), and the answer encodes itself.
#[derive(Debug, Clone, Copy)]
pub struct FrameCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for FrameCodec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T, U> Codec for FrameCodec<T, U>
where
    T: WireEncode + Send + 'static,
    U: WireDecode + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = FrameEncoder<T>;
    type Decoder = FrameDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        FrameEncoder(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        FrameDecoder(PhantomData)
    }
}

#[derive(Debug)]
pub struct FrameEncoder<T>(PhantomData<T>);

impl<T: WireEncode> Encoder for FrameEncoder<T> {
    type Item = T;
    type Error = Status;

    fn encode(&mut self, item: T, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        // Grown once, not doubling as a large batch's answers are written.
        buf.reserve(item.encoded_len());
        item.encode_wire(buf);
        Ok(())
    }

    fn buffer_settings(&self) -> BufferSettings {
        buffer_settings(T::BUFFER_SIZE)
    }
}

#[derive(Debug)]
pub struct FrameDecoder<U>(PhantomData<U>);

impl<U: WireDecode> Decoder for FrameDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        // `DecodeBuf` splits its `BytesMut`: the message's bytes, shared, not copied.
        let len = buf.remaining();
        Ok(Some(U::from(buf.copy_to_bytes(len))))
    }

    fn buffer_settings(&self) -> BufferSettings {
        buffer_settings(U::BUFFER_SIZE)
    }
}
