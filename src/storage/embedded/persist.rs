//! Persistence of the embedded store: recovery at start-up (load the page
//! files, migrate pages stored by earlier versions, replay the journal) and
//! the background checkpoint (write changed pages in place, sync, drop the
//! journal records they cover).

use super::filter::{Loaded, TooFar};
use super::*;

/// Page bytes a checkpoint may write per journal byte it retires: the
/// bound that makes disk writes scale with traffic, not with filter size.
/// It also keeps the journal within half of the changed pages (and within
/// `checkpoint_journal_bytes`). 2, not 5: under random adds every page is
/// dirty again by each checkpoint, and at 5 rewriting them took about a
/// fifth of the server's CPU; at 2, AddIfAbsent ran 6-29% faster
/// (docs/benchmarks.md), for a start-up replay of up to 2.5x the journal.
pub const PAGE_BYTES_PER_JOURNAL_BYTE: u64 = 2;
/// Journal bytes that trigger a checkpoint without waiting for the
/// interval, at least (see `checkpoint_interval_ms`).
const EARLY_JOURNAL_BYTES: u64 = 8 << 20;
/// Legacy page length (stamps of 4 bytes, 1,024 per page).
const LEGACY_PAGE_BITS: u32 = 1024;

impl Inner {
    pub(super) fn recover(&self) -> Result<(), StorageError> {
        self.with_fjall(|h| self.recover_from(h))
    }

    fn recover_from(&self, h: &Handles) -> Result<(), StorageError> {
        let started = std::time::Instant::now();
        let now = now_ms();
        let mut map = HashMap::new();
        let mut dedupers = HashMap::new();
        let (mut reserved, mut configs) = (0u64, 0usize);
        for kv in h.meta.iter() {
            let (key, value) = kv.into_inner().map_err(unavailable)?;
            // An unusable config is that deduper's error alone: not loaded
            // (its page file stays; its journal records are not replayed),
            // refused with this message when looked up (`get_deduper`).
            let d = match decode_meta(&key, &value) {
                Ok(d) => d,
                Err(e) => {
                    tracing::error!(error = %e, "deduper config unusable: not loaded, the deduper is refused");
                    continue;
                }
            };
            configs += 1;
            // One filter per generation (`generations.rs`): generation 0
            // under the meta key itself, later ones under `<name>~g<N>`.
            for f in crate::generations::physical_filters(&d) {
                let key = codec::deduper_key(&f.client_id, &f.name);
                reserved += Filter::full_memory_bytes(&f.geometry);
                map.insert(key.clone(), Arc::new(Entry::new(&self.config, &f)));
                dedupers.insert(key, f);
            }
        }
        // A generation's page file no config names (a crash after its
        // retirement was recorded, before its file went) holds nothing live.
        let orphans = remove_orphan_generation_files(&self.config, &map)?;
        let (mut pages, mut torn) = (0u64, 0u64);
        for (key, entry) in &map {
            let d = &dedupers[key];
            let (p, t) = load_page_file(entry, d, now)?;
            pages += p;
            torn += t;
        }
        let mut legacy = 0u64;
        for kv in h.pages.iter() {
            let (key, value) = kv.into_inner().map_err(unavailable)?;
            let (deduper, shard, page) = codec::parse_page_key(&key)?;
            if let (Some(e), Some(d)) = (map.get(deduper), dedupers.get(deduper)) {
                let first = page * d.geometry.bits_per_shard.min(LEGACY_PAGE_BITS);
                for (i, w) in value.chunks_exact(4).enumerate() {
                    let secs = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                    let bit = BitAddr {
                        shard,
                        bit: first + i as u32,
                    };
                    raise_replayed(e, d, std::slice::from_ref(&bit), secs, now);
                }
            }
            legacy += 1;
        }
        // Journals of earlier versions (a fjall keyspace), then ours.
        let (mut records, mut journal_bytes) = (0u64, 0u64);
        let mut replay = |value: &[u8]| -> Result<(), StorageError> {
            let w = codec::decode_write(value)?;
            if let (Some(e), Some(d)) = (map.get(w.deduper), dedupers.get(w.deduper)) {
                raise_replayed(e, d, &w.bits, w.stamp, now);
            }
            records += 1;
            journal_bytes += value.len() as u64;
            Ok(())
        };
        let mut legacy_journal = false;
        for kv in h.legacy_journal.iter() {
            let (_, value) = kv.into_inner().map_err(unavailable)?;
            replay(&value)?;
            legacy_journal = true;
        }
        if self.journal.get().is_none() {
            let mut failed = Ok(());
            let allow = self.config.start_with_damaged_journal;
            let opened = journal::Journal::open(&self.config.path.join("journal"), self.config.fsync, allow, |r| {
                if failed.is_ok() {
                    failed = replay(r);
                }
            });
            let (journal, damage) = match opened {
                Ok(opened) => opened,
                Err(journal::OpenError::Io(e)) => return Err(unavailable(format!("opening the journal: {e}"))),
                Err(journal::OpenError::Damaged(damage)) => return Err(super::damage::refusal(&damage)),
            };
            failed?;
            let lost = super::damage::report(&damage);
            self.unreadable_journal_records.store(lost, Ordering::SeqCst);
            let _ = self.journal.set(journal);
        }
        self.legacy_pages.store(legacy > 0 || legacy_journal, Ordering::SeqCst);
        let mut requests = 0u64;
        for kv in h.requests.iter() {
            let (key, value) = kv.into_inner().map_err(unavailable)?;
            requests += u64::from(self.requests.load(&key, &value, now_ms()));
        }
        let mut record_ids = 0u64;
        for kv in h.records.iter() {
            let (key, value) = kv.into_inner().map_err(unavailable)?;
            record_ids += self.records.load(&key, &value, now_ms());
        }
        if torn > 0 {
            tracing::warn!(
                torn_pages = torn,
                "pages with a bad checksum (a write torn by a power loss) were loaded keeping every set bit for a full expiry"
            );
        }
        tracing::info!(
            dedupers = configs,
            // A resized deduper has a filter per live generation.
            filters = map.len(),
            requests,
            record_ids,
            pages,
            legacy_pages = legacy,
            journal_records = records,
            orphan_generation_files = orphans,
            elapsed_ms = started.elapsed().as_millis() as u64,
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
        self.journal_bytes.store(journal_bytes, Ordering::SeqCst);
        *self.entries.write().unwrap_or_else(|p| p.into_inner()) = map;
        Ok(())
    }

    pub(super) fn checkpoint_loop(&self) {
        lower_thread_priority();
        let interval = Duration::from_millis(self.config.checkpoint_interval_ms.max(10));
        let mut last = std::time::Instant::now();
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
            // A failing checkpoint backs off (1 s doubling to 30 s) instead
            // of retrying at each wake-up; `checkpoint` logs and reports it.
            let now = std::time::Instant::now();
            if !self.checkpoints.may_try(now) || !self.checkpoint_due(last.elapsed() >= interval) {
                continue;
            }
            last = now;
            let _ = self.checkpoint();
        }
    }

    /// Whether the journal has earned a checkpoint: the pages to write cost
    /// at most [`PAGE_BYTES_PER_JOURNAL_BYTE`] per journal byte, and either
    /// the interval passed or the journal reached half of the dedupers'
    /// full size (at least 8 MiB); or the journal reached
    /// `checkpoint_journal_bytes`, whatever the cost.
    pub(super) fn checkpoint_due(&self, interval_passed: bool) -> bool {
        let journal = self.journal_bytes.load(Ordering::Relaxed);
        if journal == 0 {
            return false;
        }
        if journal >= self.config.checkpoint_journal_bytes {
            return true;
        }
        let (dirty, full) =
            self.entries
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .values()
                .fold((0u64, 0u64), |(d, f), e| {
                    let filter = e.filter();
                    let pages = u64::from(filter.pages_per_shard()) * filter.shard_count();
                    (
                        d + filter.dirty_bytes(),
                        f + pages * pagefile::slot_bytes(filter.page_len()),
                    )
                });
        journal.saturating_mul(PAGE_BYTES_PER_JOURNAL_BYTE) >= dirty
            && (interval_passed || journal >= (full / PAGE_BYTES_PER_JOURNAL_BYTE).max(EARLY_JOURNAL_BYTES))
    }

    /// Saves changed pages, then drops the journal records they cover.
    ///
    /// Every record in the journal files writers leave had its bits raised
    /// in memory and its page marked dirty before the switch, so the pages
    /// saved after it include it. Records written since stay.
    /// Every outcome is counted in `self.checkpoints` (metrics, health,
    /// the loop's backoff, the log).
    pub(super) fn checkpoint(&self) -> Result<(), StorageError> {
        let _one = self.checkpoint_lock.lock().unwrap_or_else(|p| p.into_inner());
        let r = self.with_fjall(|h| self.checkpoint_with(h));
        match &r {
            Ok(()) => self.checkpoints.succeeded(),
            Err(e) => self.checkpoints.failed(e),
        }
        r
    }

    fn checkpoint_with(&self, h: &Handles) -> Result<(), StorageError> {
        // Exclusive for a moment: no write is between its journal append
        // and its raise. Writers move to a new journal file: every record in
        // the older ones has its page dirty, so deleting them once the pages
        // are saved drops exactly what they cover.
        let journal = self.journal()?;
        let (keep, journal_before) = {
            let _all = self.commit.write().unwrap_or_else(|p| p.into_inner());
            let keep = journal
                .switch()
                .map_err(|e| unavailable(format!("starting a journal file: {e}")))?;
            (keep, self.journal_bytes.load(Ordering::SeqCst))
        };
        let entries: Vec<Arc<Entry>> = self
            .entries
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        if let Err(e) = save_pages(&entries) {
            // Dirty flags were taken: put them back so nothing is skipped next time.
            for entry in &entries {
                let filter = entry.filter();
                filter.pages().for_each(|(_, _, p)| filter.mark_dirty(p));
            }
            return Err(e);
        }
        journal
            .drop_before(keep)
            .map_err(|e| unavailable(format!("deleting old journal files: {e}")))?;
        let _ = self
            .journal_bytes
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| {
                Some(b.saturating_sub(journal_before))
            });
        let mut batch = h.db.batch();
        for key in self.requests.sweep(now_ms()) {
            batch.remove(&h.requests, key);
        }
        for key in self.records.sweep(now_ms()) {
            batch.remove(&h.records, key);
        }
        batch.commit().map_err(unavailable)?;
        if self.legacy_pages.load(Ordering::SeqCst) {
            h.pages.clear().map_err(unavailable)?;
            h.legacy_journal.clear().map_err(unavailable)?;
            self.legacy_pages.store(false, Ordering::SeqCst);
            tracing::info!("pages stored by an earlier version are now in page files");
        }
        Ok(())
    }
}

/// Removes the page files of generations (`<name>~g<N>.bits`) that no
/// filter of `map` owns; returns how many. Errors: `Unavailable`.
fn remove_orphan_generation_files(
    config: &EmbeddedConfig,
    map: &HashMap<Vec<u8>, Arc<Entry>>,
) -> Result<u64, StorageError> {
    let owned: std::collections::HashSet<&std::path::Path> = map.values().map(|e| e.path.as_path()).collect();
    let Ok(clients) = std::fs::read_dir(config.path.join("filters")) else {
        return Ok(0);
    };
    let mut removed = 0;
    for client in clients.flatten() {
        let Ok(files) = std::fs::read_dir(client.path()) else {
            continue;
        };
        for file in files.flatten() {
            let path = file.path();
            let name = file.file_name();
            let generation = name.to_str().is_some_and(crate::generations::is_generation_name);
            if generation && !owned.contains(path.as_path()) {
                std::fs::remove_file(&path).map_err(|e| unavailable(format!("removing {}: {e}", path.display())))?;
                tracing::info!(path = %path.display(), "removed the page file of a retired generation");
                removed += 1;
            }
        }
    }
    Ok(removed)
}

/// Gives the calling thread the lowest CPU priority short of idle (nice
/// 19): the checkpoint copies, checksums and writes pages in bulk, and on a
/// busy machine that must not delay requests (it catches up when they
/// pause). Linux applies `setpriority` on a thread id to that thread only.
fn lower_thread_priority() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: plain syscalls on this thread's own id; failure is harmless.
        let ok = unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            libc::setpriority(libc::PRIO_PROCESS, tid, 19) == 0
        };
        if !ok {
            tracing::debug!("could not lower the checkpoint thread's priority");
        }
    }
}

/// Raises the bits of a journal record or a legacy stamp (expiry in whole
/// seconds), lengthening the filter's ticks if the expiry does not fit
/// them (the deduper's expiry shrank since). Expired ones are skipped.
fn raise_replayed(entry: &Entry, d: &Deduper, bits: &[BitAddr], secs: u32, now: i64) {
    let expire = i64::from(secs) * 1000;
    if secs == 0 || expire < now {
        return;
    }
    // One filter lookup per record, not per bit: replay is start-up time.
    let Some(filter) = entry.filter_for(super::Wait::Yes, d, expire, now) else {
        return; // a waiting lookup always answers
    };
    let (tick, now_tick) = (filter.tick_of(expire), filter.now_tick(now));
    for (i, a) in bits.iter().enumerate() {
        // Each raise is a cache miss: overlap them, as writes do.
        if let Some(ahead) = bits.get(i + super::PREFETCH_AHEAD) {
            filter.prefetch(ahead.shard, ahead.bit);
        }
        let _ = filter.raise(a.shard, a.bit, tick, now_tick);
    }
}

/// Loads a deduper's page file; returns (pages loaded, torn pages).
fn load_page_file(entry: &Entry, d: &Deduper, now: i64) -> Result<(u64, u64), StorageError> {
    let expiry_ms = (d.expiry_seconds as i64).saturating_mul(1000);
    let (page_len, per_shard) = {
        let f = entry.filter();
        (f.page_len(), u64::from(f.pages_per_shard()))
    };
    let (mut pages, mut torn) = (0u64, 0u64);
    let mut failed = None;
    pagefile::read_slots(&entry.path, page_len, |slot, bytes| {
        let (shard, page) = ((slot / per_shard) as u32, (slot % per_shard) as u32);
        let load = || entry.filter().load_page(shard, page, bytes, now, expiry_ms);
        let mut result = load();
        if result == Err(TooFar) {
            // Written with longer ticks than the deduper's expiry now asks for.
            let stored = Filter::stored_tick_ms(bytes);
            let mut f = entry.filter.write().unwrap_or_else(|p| p.into_inner());
            if stored > f.tick_ms() {
                *f = f.retick(&d.geometry, stored, now);
            }
            drop(f);
            result = load();
        }
        match result {
            Ok(Loaded::Good) => pages += 1,
            Ok(Loaded::Torn) => {
                pages += 1;
                torn += 1;
            }
            Ok(Loaded::Empty) => {}
            Err(TooFar) => failed = Some(slot),
        }
    })
    .map_err(|e| unavailable(format!("reading {}: {e}", entry.path.display())))?;
    if let Some(slot) = failed {
        return Err(StorageError::Corrupt(format!(
            "{}: page {slot} holds expiries its own tick length cannot reach",
            entry.path.display()
        )));
    }
    Ok((pages, torn))
}

/// Writes every dirty page in place and syncs each page file touched.
/// Runs without blocking writers: pages are copied under their seqlocks.
fn save_pages(entries: &[Arc<Entry>]) -> Result<u64, StorageError> {
    let mut written = 0u64;
    let mut buf = Vec::with_capacity(filter::PAGE_BYTES);
    for entry in entries {
        let filter = entry.filter();
        let per_shard = u64::from(filter.pages_per_shard());
        let mut file = entry.file.lock().unwrap_or_else(|p| p.into_inner());
        let mut touched = false;
        for (shard, page_no, page) in filter.pages() {
            if !filter.take_dirty(page) {
                continue;
            }
            if file.is_none() {
                *file = Some(
                    pagefile::PageFile::open(&entry.path, filter.page_len())
                        .map_err(|e| unavailable(format!("opening {}: {e}", entry.path.display())))?,
                );
            }
            let f = file.as_ref().expect("opened above");
            page.encode(filter.tick_ms(), &mut buf);
            f.write(u64::from(shard) * per_shard + u64::from(page_no), &buf)
                .map_err(|e| unavailable(format!("writing {}: {e}", entry.path.display())))?;
            touched = true;
            written += 1;
        }
        if touched && let Some(f) = file.as_ref() {
            f.sync()
                .map_err(|e| unavailable(format!("syncing {}: {e}", entry.path.display())))?;
        }
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::sizing::Geometry;
    use crate::deduper::Level;

    /// A data directory written by an earlier version (pages of u32 seconds
    /// in the `pages` keyspace) opens with every live bit, moves into a page
    /// file at the first checkpoint, and leaves the keyspace empty.
    #[test]
    fn pages_of_earlier_versions_migrate_into_page_files() {
        let dir = tempfile::tempdir().unwrap();
        let config = EmbeddedConfig {
            path: dir.path().join("data"),
            ..Default::default()
        };
        let g = Geometry {
            hash_functions: 3,
            shards: 2,
            bits_per_shard: 3000,
        };
        let now = now_ms();
        let d = Deduper::new("c", "old", g, 3600, Level::Global, now);
        let live = (now / 1000 + 1800) as u32;
        let expired = (now / 1000 - 10) as u32;
        {
            let store = EmbeddedStore::open(config.clone()).unwrap();
            store.create_deduper(&d).unwrap();
            // Page 2 of shard 1 in the old layout: bits 2048.. of 1,024 each.
            let mut page = vec![0u8; 1024 * 4];
            page[5 * 4..6 * 4].copy_from_slice(&live.to_le_bytes());
            page[6 * 4..7 * 4].copy_from_slice(&expired.to_le_bytes());
            let key = codec::page_key(&codec::deduper_key("c", "old"), 1, 2);
            store
                .inner
                .with_fjall(|h| h.pages.insert(key, page).map_err(unavailable))
                .unwrap();
        }
        let store = EmbeddedStore::open(config.clone()).unwrap();
        let cells = store
            .read_bits(&d, &[BitAddr { shard: 1, bit: 2053 }, BitAddr { shard: 1, bit: 2054 }])
            .unwrap();
        let e = cells[0].expire_ms.expect("migrated bit lost");
        assert!(
            e >= i64::from(live) * 1000 && e < i64::from(live) * 1000 + 29_000,
            "{e}"
        );
        assert_eq!(cells[1].expire_ms, None, "expired legacy bit loaded");
        store.checkpoint().unwrap();
        let empty = store
            .inner
            .with_fjall(|h| h.pages.is_empty().map_err(unavailable))
            .unwrap();
        assert!(empty, "legacy pages kept after the checkpoint");
        assert!(config.path.join("filters/c/old.bits").exists());
        drop(store);
        let store = EmbeddedStore::open(config).unwrap();
        let cells = store.read_bits(&d, &[BitAddr { shard: 1, bit: 2053 }]).unwrap();
        assert_eq!(cells[0].expire_ms, Some(e), "bit not in the page file");
    }
}
