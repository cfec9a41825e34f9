//! The request stream: every request is prepared (encoded) before the timed window, so the
//! loop allocates no request protos; tonic's encoder only copies prepared bytes.
//!
//! All Authorize requests are the synthetic policy's probe subject (`bench-user` in its
//! groups), so every answer is known in advance: get pods in `ns-0` is allowed, get secrets
//! there is denied by a deny rule, delete pods in the last namespace has no opinion.
//!
//! A request is either *hot* — one of a small fixed set that repeats, so after its first
//! answer the decision cache has it — or *fresh*: a template whose resource `name` is a
//! 16-hex-digit placeholder, patched at encoding time with a counter that never repeats within
//! a run, so the cache cannot have it. The name does not change the decision (no rule of the
//! synthetic policy lists resource names).

use std::marker::PhantomData;
use std::sync::Arc;

use prost::bytes::{Buf, BufMut};
use prost::encoding::{encode_key, encode_varint, WireType};
use prost::Message;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::Status;

use super::answer::AuthorizeAnswer;
use super::{LoadgenError, Mix};
use crate::proto;
use crate::request;
use crate::synth::{self, Shape};

/// Distinct hot requests per probe kind (allowed, denied, unmatched).
pub const HOT_PER_KIND: usize = 16;
/// Operations prepared per worker; the worker cycles through them (fresh names stay fresh).
const PLAN_LEN: usize = 1024;
/// The placeholder resource name of a fresh template, overwritten at encoding time.
const PLACEHOLDER: &[u8; 16] = b"zzzzzzzzzzzzzzzz";

/// The decision a probe request must get from authzd.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    Allow,
    Deny,
    NoOpinion,
}

impl Expect {
    pub fn decision(self) -> proto::Decision {
        match self {
            Expect::Allow => proto::Decision::Allow,
            Expect::Deny => proto::Decision::Deny,
            Expect::NoOpinion => proto::Decision::NoOpinion,
        }
    }
}

/// What a target answers: authzd's real decisions, or the no-op server's empty messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answers {
    Real,
    Empty,
}

/// One encoded request message, with the offset of its placeholder name if it is fresh.
#[derive(Clone, Debug)]
struct Template {
    bytes: Vec<u8>,
    slot: Option<usize>,
}

impl Template {
    fn new(message: &impl Message, fresh: bool) -> Result<Self, LoadgenError> {
        let bytes = message.encode_to_vec();
        let slot = if fresh {
            let at = bytes
                .windows(PLACEHOLDER.len())
                .position(|w| w == PLACEHOLDER)
                .ok_or_else(|| LoadgenError::Workload("placeholder name not encoded".into()))?;
            let again = bytes[at + 1..]
                .windows(PLACEHOLDER.len())
                .any(|w| w == PLACEHOLDER);
            if again {
                return Err(LoadgenError::Workload("placeholder name not unique".into()));
            }
            Some(at)
        } else {
            None
        };
        Ok(Template { bytes, slot })
    }

    fn write(&self, counter: u64, dst: &mut impl BufMut) {
        match self.slot {
            None => dst.put_slice(&self.bytes),
            Some(at) => {
                dst.put_slice(&self.bytes[..at]);
                dst.put_slice(&hex16(counter));
                dst.put_slice(&self.bytes[at + PLACEHOLDER.len()..]);
            }
        }
    }
}

fn template<'a>(table: &'a [Template], item: &Item) -> Result<&'a Template, Status> {
    table
        .get(usize::from(item.template))
        .ok_or_else(|| Status::internal("no such template"))
}

/// `n` as exactly 16 lower-case hex digits (same length as the placeholder).
fn hex16(n: u64) -> [u8; 16] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 16];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = DIGITS[((n >> (60 - 4 * i)) & 0xf) as usize];
    }
    out
}

/// A request of the stream: which template, and the answer authzd must give.
#[derive(Clone, Copy, Debug)]
pub struct Item {
    template: u16,
    pub expect: Expect,
}

/// One RPC of a worker's plan.
#[derive(Clone, Debug)]
pub enum Op {
    Authorize(Item),
    Batch(Box<[Item]>),
    WhoCan(Item),
}

impl Op {
    /// Counters this operation consumes (one per request message it carries).
    pub fn messages(&self) -> u64 {
        match self {
            Op::Batch(items) => items.len() as u64,
            Op::Authorize(_) | Op::WhoCan(_) => 1,
        }
    }
}

/// The three RPCs, in report order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Authorize = 0,
    Batch = 1,
    WhoCan = 2,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Authorize, Kind::Batch, Kind::WhoCan];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Authorize => "authorize",
            Kind::Batch => "batch",
            Kind::WhoCan => "who-can",
        }
    }
}

impl Op {
    pub fn kind(&self) -> Kind {
        match self {
            Op::Authorize(_) => Kind::Authorize,
            Op::Batch(_) => Kind::Batch,
            Op::WhoCan(_) => Kind::WhoCan,
        }
    }
}

/// Everything the workers send, prepared before the run; shared by both targets so they get
/// the identical stream.
#[derive(Debug)]
pub struct Workload {
    /// `AuthorizeRequest` messages: hot ones first, then one fresh template per probe kind.
    authorize: Vec<Template>,
    /// `GetAllowedSubjectsRequest` messages: [hot, fresh].
    who_can: Vec<Template>,
    /// The group who-can must list (the probe's group bound in `ns-0`).
    pub probe_group: String,
    plans: Vec<Vec<Op>>,
}

/// xorshift64*, seeded per worker: the same plan every run.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).max(1))
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u32) -> u32 {
        (self.next() % u64::from(n.max(1))) as u32
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn with_name(mut action: request::Action, name: &str) -> request::Action {
    if let request::Action::Resource(r) = &mut action {
        r.name = name.to_string();
    }
    action
}

/// The `AuthorizeRequest` the load generator sends for `request`, naming resource `name`.
pub(crate) fn authorize_message(request: &request::Request, name: &str) -> proto::AuthorizeRequest {
    proto::AuthorizeRequest {
        user: Some(proto::UserInfo {
            name: request.user.name.clone(),
            groups: request.user.groups.clone(),
            ..Default::default()
        }),
        action: Some(crate::api::convert::wire_action(&with_name(
            request.action.clone(),
            name,
        ))),
        min_revision: 0,
        content: None,
        conditions_mode: 0,
    }
}

/// The probe requests of `shape`, with the decision each must get.
pub fn probes(shape: &Shape) -> [(request::Request, Expect); 3] {
    [
        (synth::allowed_request(shape), Expect::Allow),
        (synth::denied_request(shape), Expect::Deny),
        (synth::unmatched_request(shape), Expect::NoOpinion),
    ]
}

/// How the stream is drawn.
#[derive(Clone, Copy, Debug)]
pub struct StreamShape {
    pub workers: usize,
    pub mix: Mix,
    pub batch_size: usize,
    pub cache_hit_ratio: f64,
    /// Bytes of content per object on every Authorize (0: none).
    pub content_bytes: usize,
}

/// An update's content of about `bytes` per object: a ConfigMap whose data fills the size,
/// with one label changed between the stored object and the new one.
pub fn content_of_size(bytes: usize) -> proto::Content {
    let object = |label: &str| {
        let head = format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"load","labels":{{"app":"{label}"}}}},"data":{{"#
        );
        let mut text = head;
        let mut i = 0;
        while text.len() + 2 < bytes {
            if i > 0 {
                text.push(',');
            }
            let room = bytes.saturating_sub(text.len() + 16).clamp(1, 64);
            text.push_str(&format!(r#""k{i}":"{}""#, "x".repeat(room)));
            i += 1;
        }
        text.push_str("}}");
        text.into_bytes()
    };
    proto::Content {
        object: object("new"),
        old_object: object("old"),
        changed_paths: Vec::new(),
    }
}

impl Workload {
    pub fn build(shape: &Shape, stream: &StreamShape) -> Result<Self, LoadgenError> {
        let probes = probes(shape);
        let placeholder = std::str::from_utf8(PLACEHOLDER)
            .map_err(|_| LoadgenError::Workload("placeholder is not UTF-8".into()))?;
        let mut authorize = Vec::with_capacity(probes.len() * (HOT_PER_KIND + 1));
        let mut expects = Vec::with_capacity(authorize.capacity());
        let content = (stream.content_bytes > 0).then(|| content_of_size(stream.content_bytes));
        let message = |request: &request::Request, name: &str| proto::AuthorizeRequest {
            content: content.clone(),
            ..authorize_message(request, name)
        };
        for (request, expect) in &probes {
            for i in 0..HOT_PER_KIND {
                authorize.push(Template::new(
                    &message(request, &format!("hot-{i}")),
                    false,
                )?);
                expects.push(*expect);
            }
        }
        let fresh_base = authorize.len();
        for (request, expect) in &probes {
            authorize.push(Template::new(&message(request, placeholder), true)?);
            expects.push(*expect);
        }
        let who_can_message = |name: &str| proto::GetAllowedSubjectsRequest {
            action: Some(crate::api::convert::wire_action(&with_name(
                synth::who_can_action(),
                name,
            ))),
            min_revision: 0,
            content: None,
            conditions_mode: 0,
        };
        let who_can = vec![
            Template::new(&who_can_message("hot"), false)?,
            Template::new(&who_can_message(placeholder), true)?,
        ];
        let probe_group = synth::probe_groups(shape)
            .pop()
            .ok_or_else(|| LoadgenError::Workload("the probe user has no groups".into()))?;

        let kinds = probes.len() as u32;
        let item = |rng: &mut Rng| -> Item {
            let kind = rng.below(kinds) as usize;
            let index = if rng.unit() < stream.cache_hit_ratio {
                kind * HOT_PER_KIND + rng.below(HOT_PER_KIND as u32) as usize
            } else {
                fresh_base + kind
            };
            Item {
                template: index as u16,
                expect: expects[index],
            }
        };
        let weights = stream.mix.weights();
        let total: u32 = weights.iter().sum();
        let plans = (0..stream.workers)
            .map(|worker| {
                let mut rng = Rng::new(worker as u64 + 1);
                (0..PLAN_LEN)
                    .map(|_| {
                        let mut pick = rng.below(total);
                        let mut kind = Kind::Authorize;
                        for (k, w) in Kind::ALL.iter().zip(weights) {
                            if pick < w {
                                kind = *k;
                                break;
                            }
                            pick -= w;
                        }
                        match kind {
                            Kind::Authorize => Op::Authorize(item(&mut rng)),
                            Kind::Batch => {
                                Op::Batch((0..stream.batch_size).map(|_| item(&mut rng)).collect())
                            }
                            Kind::WhoCan => {
                                let fresh = rng.unit() >= stream.cache_hit_ratio;
                                Op::WhoCan(Item {
                                    template: u16::from(fresh),
                                    expect: Expect::Allow,
                                })
                            }
                        }
                    })
                    .collect()
            })
            .collect();
        Ok(Workload {
            authorize,
            who_can,
            probe_group,
            plans,
        })
    }

    /// Operation `index` (cycling) of `worker`'s plan.
    pub fn op(&self, worker: usize, index: usize) -> Option<&Op> {
        let plan = self.plans.get(worker)?;
        plan.get(index % plan.len().max(1))
    }

    /// Encodes operation `op` of `worker` with fresh names numbered from `counter`.
    fn encode(&self, out: &Outgoing, dst: &mut impl BufMut) -> Result<(), Status> {
        let op = self
            .op(out.worker, out.op)
            .ok_or_else(|| Status::internal("no such operation"))?;
        match op {
            Op::Authorize(item) => template(&self.authorize, item)?.write(out.counter, dst),
            Op::WhoCan(item) => template(&self.who_can, item)?.write(out.counter, dst),
            Op::Batch(items) => {
                for (i, item) in items.iter().enumerate() {
                    let t = template(&self.authorize, item)?;
                    encode_key(1, WireType::LengthDelimited, dst);
                    encode_varint(t.bytes.len() as u64, dst);
                    t.write(out.counter + i as u64, dst);
                }
            }
        }
        Ok(())
    }

    /// Whether an Authorize answer is the expected one; `Ok(cached)` if so.
    pub fn check_authorize(
        answers: Answers,
        expect: Expect,
        response: &AuthorizeAnswer,
    ) -> Result<bool, String> {
        match answers {
            Answers::Empty if !response.non_empty => Ok(false),
            Answers::Empty => Err("the no-op server answered a non-empty message".into()),
            Answers::Real
                if response.decision == expect.decision() as i32
                    && response.allowed == (expect == Expect::Allow) =>
            {
                Ok(response.cached)
            }
            Answers::Real => Err(format!(
                "expected {:?}, got {} (allowed {})",
                expect.decision(),
                proto::Decision::try_from(response.decision)
                    .map_or_else(|_| response.decision.to_string(), |d| format!("{d:?}")),
                response.allowed,
            )),
        }
    }

    pub fn check_who_can(
        &self,
        answers: Answers,
        response: &proto::GetAllowedSubjectsResponse,
    ) -> Result<(), String> {
        match answers {
            Answers::Empty if *response == proto::GetAllowedSubjectsResponse::default() => Ok(()),
            Answers::Empty => Err("the no-op server answered a non-empty message".into()),
            Answers::Real if response.groups.contains(&self.probe_group) => Ok(()),
            Answers::Real => Err(format!(
                "who-can did not list group `{}` ({} groups listed)",
                self.probe_group,
                response.groups.len()
            )),
        }
    }
}

/// One request on the wire: operation `op` of `worker`'s plan, fresh names from `counter`.
/// Cloning the workload handle is a reference count; the bytes are written by the encoder.
pub struct Outgoing {
    pub workload: Arc<Workload>,
    pub worker: usize,
    pub op: usize,
    pub counter: u64,
}

/// A codec whose requests are prepared [`Outgoing`] messages and whose responses are `D`.
pub struct WireCodec<D>(PhantomData<D>);

impl<D> Default for WireCodec<D> {
    fn default() -> Self {
        WireCodec(PhantomData)
    }
}

pub struct WireEncoder;

pub struct WireDecoder<D>(PhantomData<D>);

impl<D: Message + Default + Send + 'static> Codec for WireCodec<D> {
    type Encode = Outgoing;
    type Decode = D;
    type Encoder = WireEncoder;
    type Decoder = WireDecoder<D>;

    fn encoder(&mut self) -> WireEncoder {
        WireEncoder
    }

    fn decoder(&mut self) -> WireDecoder<D> {
        WireDecoder(PhantomData)
    }
}

impl Encoder for WireEncoder {
    type Item = Outgoing;
    type Error = Status;

    fn encode(&mut self, item: Outgoing, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.workload.encode(&item, dst)
    }
}

impl<D: Message + Default> Decoder for WireDecoder<D> {
    type Item = D;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<D>, Status> {
        let message = D::decode(src.chunk())
            .map_err(|e| Status::internal(format!("cannot decode the response: {e}")))?;
        let len = src.remaining();
        src.advance(len);
        Ok(Some(message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Decision, Engine, EngineConfig};

    fn stream(cache_hit_ratio: f64) -> StreamShape {
        StreamShape {
            workers: 3,
            mix: Mix {
                authorize: 1,
                batch: 1,
                who_can: 1,
            },
            batch_size: 5,
            cache_hit_ratio,
            content_bytes: 0,
        }
    }

    fn encode(workload: &Arc<Workload>, worker: usize, op: usize, counter: u64) -> Vec<u8> {
        let out = Outgoing {
            workload: Arc::clone(workload),
            worker,
            op,
            counter,
        };
        let mut buf = Vec::new();
        workload.encode(&out, &mut buf).unwrap();
        buf
    }

    /// The expectations hold on the synthetic policy, evaluated in process by the engine.
    #[test]
    fn probe_expectations_match_the_engine() {
        let shape = Shape::with_bindings(1000);
        let engine = Engine::new(&synth::policy(&shape, 42), EngineConfig::default());
        for (request, expect) in probes(&shape) {
            for name in ["", "hot-3", "00000000000001ff"] {
                let request = request::Request {
                    action: with_name(request.action.clone(), name),
                    ..request.clone()
                };
                let decision = engine.authorize(&request).decision;
                let want = match expect {
                    Expect::Allow => Decision::Allow,
                    Expect::Deny => Decision::Deny,
                    Expect::NoOpinion => Decision::NoOpinion,
                };
                assert_eq!(decision, want, "{request:?}");
            }
        }
        let group = synth::probe_groups(&shape).pop().unwrap();
        let subjects = engine.allowed_subjects(&with_name(synth::who_can_action(), "x"));
        assert!(subjects.groups.contains(&group));
    }

    #[test]
    fn fresh_requests_decode_with_distinct_names_and_batches_decode_in_order() {
        let shape = Shape::with_bindings(100);
        let workload = Arc::new(Workload::build(&shape, &stream(0.0)).unwrap());
        let name = |r: &proto::AuthorizeRequest| match r.action.as_ref().unwrap().kind.as_ref() {
            Some(proto::action::Kind::ResourceAttributes(a)) => a.name.clone(),
            other => panic!("{other:?}"),
        };
        let mut seen = 0;
        for op in 0..64 {
            match workload.op(1, op).unwrap() {
                Op::Authorize(item) => {
                    let bytes = encode(&workload, 1, op, 0xabc);
                    let request = proto::AuthorizeRequest::decode(bytes.as_slice()).unwrap();
                    assert_eq!(name(&request), "0000000000000abc");
                    assert_eq!(request.user.unwrap().name, synth::PROBE_USER);
                    assert!(item.template as usize >= 3 * HOT_PER_KIND);
                    seen |= 1;
                }
                Op::Batch(items) => {
                    let bytes = encode(&workload, 1, op, 16);
                    let batch = proto::BatchAuthorizeRequest::decode(bytes.as_slice()).unwrap();
                    assert_eq!(batch.requests.len(), items.len());
                    for (i, request) in batch.requests.iter().enumerate() {
                        assert_eq!(name(request), format!("{:016x}", 16 + i));
                    }
                    seen |= 2;
                }
                Op::WhoCan(_) => {
                    let bytes = encode(&workload, 1, op, 7);
                    let request =
                        proto::GetAllowedSubjectsRequest::decode(bytes.as_slice()).unwrap();
                    assert!(request.action.is_some());
                    seen |= 4;
                }
            }
        }
        assert_eq!(seen, 7, "every kind appears in 64 operations");
    }

    #[test]
    fn hit_ratio_one_draws_only_hot_requests_and_plans_are_deterministic() {
        let shape = Shape::with_bindings(100);
        let a = Workload::build(&shape, &stream(1.0)).unwrap();
        let b = Workload::build(&shape, &stream(1.0)).unwrap();
        for op in 0..PLAN_LEN {
            let items: Vec<Item> = match a.op(2, op).unwrap() {
                Op::Authorize(i) => vec![*i],
                Op::Batch(items) => items.to_vec(),
                Op::WhoCan(i) => {
                    assert_eq!(i.template, 0);
                    vec![]
                }
            };
            for item in items {
                assert!((item.template as usize) < 3 * HOT_PER_KIND);
            }
            assert_eq!(format!("{:?}", a.op(2, op)), format!("{:?}", b.op(2, op)));
        }
    }

    #[test]
    fn hex16_is_fixed_width() {
        assert_eq!(&hex16(0), b"0000000000000000");
        assert_eq!(&hex16(u64::MAX), b"ffffffffffffffff");
        assert_eq!(&hex16(0x1234), b"0000000000001234");
    }

    /// Content of a given size is about that size per object and is JSON.
    #[test]
    fn content_is_json_of_about_the_size_asked() {
        for bytes in [200, 2048, 10_000] {
            let content = content_of_size(bytes);
            for object in [&content.object, &content.old_object] {
                let value: serde_json::Value = serde_json::from_slice(object).unwrap();
                assert!(value.is_object());
                assert!(
                    object.len().abs_diff(bytes) <= 80,
                    "{} for {bytes}",
                    object.len()
                );
            }
            assert_ne!(content.object, content.old_object);
        }
    }
}
