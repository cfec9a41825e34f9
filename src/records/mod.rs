//! What the server writes down, off its serving threads: the audit log of review calls and
//! policy writes ([`audit`]), and decision records, one per decision taken ([`decision`], in
//! the versioned format of [`format`], docs/records.md). Both go through one kind of writer
//! ([`writer`]): a bounded queue that a request never waits on, and a thread that appends
//! JSON lines, rotating decision record files by size. What cannot be written is dropped and
//! counted — a line counts as written only once the file took it ([`pending`]) — and a gap in
//! the decision records is itself written down.

pub mod audit;
pub mod decision;
pub mod format;
pub mod pending;
pub mod record;
pub mod time;
pub mod writer;
