//! Persistence of the embedded store: recovery at start-up (load pages,
//! replay the journal) and the background checkpoint (save changed pages,
//! drop the journal records they cover, sweep expired stamps).

use super::*;

impl Inner {
    pub(super) fn recover(&self) -> Result<(), StorageError> {
        self.with_fjall(|h| self.recover_from(h))
    }

    fn recover_from(&self, h: &Handles) -> Result<(), StorageError> {
        let mut map = HashMap::new();
        let mut reserved = 0u64;
        for kv in h.meta.iter() {
            let (key, value) = kv.into_inner().map_err(unavailable)?;
            let d = decode_meta(&value)?;
            reserved += Filter::full_memory_bytes(&d.geometry);
            map.insert(
                key.to_vec(),
                Arc::new(Entry {
                    filter: Filter::new(&d.geometry),
                    rmw: Mutex::new(()),
                }),
            );
        }
        let mut pages = 0u64;
        for kv in h.pages.iter() {
            let (key, value) = kv.into_inner().map_err(unavailable)?;
            let (deduper, shard, page) = codec::parse_page_key(&key)?;
            if let Some(e) = map.get(deduper) {
                e.filter.load_page(shard, page, &value);
                pages += 1;
            }
        }
        let (mut records, mut next) = (0u64, 0u64);
        for kv in h.journal.iter() {
            let (key, value) = kv.into_inner().map_err(unavailable)?;
            let seq = u64::from_be_bytes(
                key.as_ref()
                    .try_into()
                    .map_err(|_| StorageError::Corrupt("journal key".into()))?,
            );
            let w = codec::decode_write(&value)?;
            if let Some(e) = map.get(w.deduper) {
                for a in &w.bits {
                    e.filter.raise(a.shard, a.bit, w.stamp);
                }
            }
            records += 1;
            next = next.max(seq + 1);
        }
        let mut requests = 0u64;
        for kv in h.requests.iter() {
            let (key, value) = kv.into_inner().map_err(unavailable)?;
            requests += u64::from(self.requests.load(&key, &value, now_ms()));
        }
        tracing::info!(
            dedupers = map.len(),
            requests,
            pages,
            journal_records = records,
            "embedded store recovered"
        );
        if reserved > self.config.max_memory_mib.saturating_mul(1 << 20) {
            tracing::warn!(
                reserved_mib = reserved >> 20,
                budget_mib = self.config.max_memory_mib,
                "existing dedupers exceed storage.embedded.max_memory_mib; no new deduper can be created"
            );
        }
        *self.meta_lock.lock().unwrap_or_else(|p| p.into_inner()) = reserved;
        self.next_seq.store(next, Ordering::SeqCst);
        *self.entries.write().unwrap_or_else(|p| p.into_inner()) = map;
        Ok(())
    }

    pub(super) fn checkpoint_loop(&self) {
        let interval = Duration::from_millis(self.config.checkpoint_interval_ms.max(10));
        let sweep_every = Duration::from_secs(self.config.sweep_interval_seconds.max(1));
        let mut last_sweep = std::time::Instant::now();
        loop {
            {
                let stop = self.stop.lock().unwrap_or_else(|p| p.into_inner());
                if *stop {
                    return;
                }
                let (stop, _) = self
                    .wake
                    .wait_timeout(stop, interval)
                    .unwrap_or_else(|p| p.into_inner());
                if *stop {
                    return;
                }
            }
            let sweep = last_sweep.elapsed() >= sweep_every;
            if sweep {
                last_sweep = std::time::Instant::now();
            }
            if let Err(e) = self.checkpoint(sweep) {
                tracing::error!(error = %e, "embedded store checkpoint failed; the journal is kept and it will be retried");
            }
        }
    }

    /// Saves changed pages, then deletes the journal records they cover.
    ///
    /// Every record numbered below `upto` had its bits raised in memory and
    /// its page marked dirty before its number was taken, so the pages saved
    /// after reading `upto` include it. Records from `upto` on stay.
    pub(super) fn checkpoint(&self, sweep: bool) -> Result<(), StorageError> {
        let _one = self.checkpoint_lock.lock().unwrap_or_else(|p| p.into_inner());
        self.with_fjall(|h| self.checkpoint_with(h, sweep))
    }

    fn checkpoint_with(&self, h: &Handles, sweep: bool) -> Result<(), StorageError> {
        // Exclusive for a moment: no write is between its number and its raise.
        let upto = {
            let _all = self.commit.write().unwrap_or_else(|p| p.into_inner());
            self.next_seq.load(Ordering::SeqCst)
        };
        let entries: Vec<(Vec<u8>, Arc<Entry>)> = self
            .entries
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(k, e)| (k.clone(), e.clone()))
            .collect();
        let now_stamp = stamp_of(now_ms());
        let result = self.save_pages(h, &entries, sweep.then_some(now_stamp));
        if result.is_err() {
            // Dirty flags were taken: put them back so nothing is skipped next time.
            for (_, e) in &entries {
                e.filter.pages().for_each(|(_, _, p)| p.mark_dirty());
            }
            return result.map(drop);
        }
        let mut batch = h.db.batch();
        for kv in h.journal.range(..upto.to_be_bytes()) {
            batch.remove(&h.journal, kv.key().map_err(unavailable)?);
        }
        for key in self.requests.sweep(now_ms()) {
            batch.remove(&h.requests, key);
        }
        batch.commit().map_err(unavailable)?;
        self.journal_bytes.store(0, Ordering::Relaxed);
        result.map(drop)
    }

    /// Saves dirty pages; returns how many were written.
    fn save_pages(
        &self,
        h: &Handles,
        entries: &[(Vec<u8>, Arc<Entry>)],
        sweep_before: Option<u32>,
    ) -> Result<usize, StorageError> {
        let mut batch = h.db.batch();
        let mut written = 0;
        for (key, entry) in entries {
            for (shard, page_no, page) in entry.filter.pages() {
                if let Some(now) = sweep_before {
                    page.sweep(now);
                }
                if !page.take_dirty() {
                    continue;
                }
                written += 1;
                let pk = codec::page_key(key, shard, page_no);
                match page.encode() {
                    Some(v) => batch.insert(&h.pages, pk, v),
                    None => batch.remove(&h.pages, pk),
                }
                if batch.len() >= 4096 {
                    std::mem::replace(&mut batch, h.db.batch())
                        .commit()
                        .map_err(unavailable)?;
                }
            }
        }
        batch.commit().map_err(unavailable)?;
        h.db.persist(PersistMode::SyncAll).map_err(unavailable)?;
        Ok(written)
    }
}
