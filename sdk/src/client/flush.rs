//! The client's side of the offline outbox ([`crate::outbox`]): queueing a write, flushing
//! the queue in order, listing it and handing it back.

use std::sync::MutexGuard;
use std::sync::atomic::Ordering;

use super::{Client, random_idempotency_key};
use crate::Error;
use crate::outbox::{
    self, Delivered, FlushReport, OTHER_OWNER, Outbox, Owner, QueuedWrite, Verdict, WriteRejection,
};
use crate::request::Request;
use crate::store::StoreSlot;

impl Client {
    fn outbox_io(&self) -> Result<MutexGuard<'_, ()>, Error> {
        self.inner
            .outbox
            .io
            .lock()
            .map_err(|_| Error::InvalidState {
                state: "poisoned",
                event: "outbox",
            })
    }

    /// The outbox as stored (empty when the slot is).
    fn load_outbox(&self) -> Result<Outbox, Error> {
        let blob = self
            .inner
            .store
            .load(StoreSlot::Outbox)
            .map_err(|e| Error::Store(e.to_string()))?;
        blob.map_or_else(|| Ok(Outbox::default()), |b| outbox::decode(&b))
    }

    fn save_outbox(&self, o: &Outbox) -> Result<(), Error> {
        self.inner
            .store
            .save(StoreSlot::Outbox, &outbox::encode(o)?)
            .map_err(|e| Error::Store(e.to_string()))
    }

    /// Queues a write (`POST`, `PUT`, `PATCH` or `DELETE`) for delivery by a later flush, and
    /// saves it to the store before returning. No network. The request is checked as
    /// [`Client::send`] checks it; it keeps the caller's idempotency key or gets a random one,
    /// sent on every attempt. Needs a session ([`Error::NotSignedIn`]); a full outbox is
    /// [`Error::OutboxFull`] and queues nothing. See [`crate::outbox`].
    pub fn enqueue(&self, request: Request) -> Result<QueuedWrite, Error> {
        if !outbox::is_write(&request.method) {
            return Err(Error::InvalidInput(format!(
                "only writes (POST, PUT, PATCH, DELETE) are queued, not {}",
                request.method
            )));
        }
        let session = self.current().ok_or(Error::NotSignedIn)?;
        let mut request = request;
        let key = request
            .idempotency_key
            .clone()
            .unwrap_or_else(random_idempotency_key);
        request.idempotency_key = Some(key.clone());
        // nothing is queued that could never be sent
        request.clone().prepare()?;
        let now = self.inner.clock.now();
        let _io = self.outbox_io()?;
        let mut o = self.load_outbox()?;
        let write = o.push(
            Owner::of(&session),
            request,
            key,
            now,
            (
                self.inner.outbox.settings.max_writes,
                self.inner.outbox.settings.max_bytes,
            ),
        )?;
        self.save_outbox(&o)?;
        self.inner.outbox.pending.store(true, Ordering::SeqCst);
        Ok(write)
    }

    /// The queued writes, oldest first (nothing is removed).
    pub fn outbox(&self) -> Result<Vec<QueuedWrite>, Error> {
        Ok(self.load_outbox()?.entries)
    }

    /// Hands back every queued write and empties the outbox (its slot is cleared): for writes
    /// whose session ended, or that the app wants to handle itself. A write that a flush is
    /// sending right now may be delivered too; sending it again with its key is harmless.
    pub fn take_undelivered(&self) -> Result<Vec<QueuedWrite>, Error> {
        let _io = self.outbox_io()?;
        let blob = self
            .inner
            .store
            .load(StoreSlot::Outbox)
            .map_err(|e| Error::Store(e.to_string()))?;
        let Some(blob) = blob else {
            self.inner.outbox.pending.store(false, Ordering::SeqCst);
            return Ok(vec![]);
        };
        let o = outbox::decode(&blob)?;
        self.inner
            .store
            .clear(StoreSlot::Outbox)
            .map_err(|e| Error::Store(e.to_string()))?;
        self.inner.outbox.pending.store(false, Ordering::SeqCst);
        Ok(o.entries)
    }

    /// Delivers the queued writes in order, one at a time, until the outbox is empty or a
    /// write has to wait (see [`crate::outbox`] for what is delivered, refused for good, or
    /// kept). One flush at a time: a second caller waits for the first. Fails only when the
    /// outbox cannot be read ([`Error::Store`]); everything else is in the report.
    pub async fn flush(&self) -> Result<FlushReport, Error> {
        let report = {
            let _one = self.inner.outbox.flush.lock().await;
            self.flush_locked().await?
        };
        self.tell(&report);
        Ok(report)
    }

    /// Tells the outbox observer what a finished flush did, in the order it happened (the
    /// writes were sent in id order).
    fn tell(&self, report: &FlushReport) {
        let settings = &self.inner.outbox.settings;
        let mut rejected = report.rejected.iter().peekable();
        for d in &report.delivered {
            while let Some(r) = rejected.next_if(|r| r.write.id < d.write.id) {
                settings.tell_rejected(r);
            }
            settings.tell_delivered(d);
        }
        rejected.for_each(|r| settings.tell_rejected(r));
    }

    /// The flush itself (the caller holds the flush lock and tells the observer after).
    async fn flush_locked(&self) -> Result<FlushReport, Error> {
        let mut report = FlushReport::default();
        loop {
            let o = self.load_outbox()?;
            let Some(write) = o.entries.first().cloned() else {
                break;
            };
            let session = self.current();
            let held_back = match &session {
                None => Some(Error::NotSignedIn),
                Some(s) if !o.belongs_to(s) => Some(Error::InvalidInput(OTHER_OWNER.into())),
                Some(_) => None,
            };
            if let Some(why) = held_back {
                report.stopped = Some(why);
                report.session_ended = true;
                break;
            }
            let result = self.send_now(write.request()).await;
            match outbox::verdict(result) {
                Verdict::Delivered(response) => {
                    let removed = self.remove_write(write.id);
                    report.delivered.push(Delivered { write, response });
                    if let Err(e) = removed {
                        // delivered, still stored: the next flush sends it again, same key
                        report.stopped = Some(e);
                        break;
                    }
                }
                Verdict::Rejected {
                    status,
                    code,
                    refusal,
                } => {
                    let removed = self.remove_write(write.id);
                    tracing::info!(id = write.id, status, "outbox write refused for good");
                    report.rejected.push(WriteRejection {
                        write,
                        status,
                        code,
                        refusal,
                    });
                    if let Err(e) = removed {
                        report.stopped = Some(e);
                        break;
                    }
                }
                Verdict::Kept { why, session_ended } => {
                    report.stopped = Some(why);
                    report.session_ended = session_ended;
                    break;
                }
            }
        }
        let _io = self.outbox_io()?;
        report.remaining = self.load_outbox()?.entries.len();
        self.inner
            .outbox
            .pending
            .store(report.remaining > 0, Ordering::SeqCst);
        Ok(report)
    }

    /// Removes a delivered or refused write from the stored outbox (if still there).
    fn remove_write(&self, id: u64) -> Result<(), Error> {
        let _io = self.outbox_io()?;
        let mut o = self.load_outbox()?;
        if o.remove(id) {
            self.save_outbox(&o)?;
        }
        Ok(())
    }

    /// Starts a flush on the current tokio runtime when writes may be queued, a session exists
    /// and no flush runs. Results go to the outbox observer. Outside a runtime: nothing.
    pub(super) fn flush_in_background(&self) {
        if !self.inner.outbox.pending.load(Ordering::SeqCst) || self.current().is_none() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let client = self.clone();
        rt.spawn(async move {
            let result = {
                let Ok(_one) = client.inner.outbox.flush.try_lock() else {
                    return; // a flush runs already
                };
                client.flush_locked().await
            };
            match result {
                Ok(r) => {
                    client.tell(&r);
                    tracing::info!(
                        delivered = r.delivered.len(),
                        rejected = r.rejected.len(),
                        remaining = r.remaining,
                        stopped = r.stopped.is_some(),
                        "background outbox flush"
                    )
                }
                Err(e) => tracing::warn!(error = %e, "background outbox flush failed"),
            }
        });
    }
}
