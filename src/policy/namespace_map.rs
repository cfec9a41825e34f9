//! The index's namespace partitions by name, in a map whose copy is cheap.
//!
//! An incremental update ([`crate::policy::compile::apply`]) replaces the partitions of the
//! namespaces a change touched and shares every other one. With one flat map, the update still
//! copied the map itself — an entry per namespace — and dropped the previous one: at 10k
//! namespaces (100k bindings) that was half of what a replica spent applying a one-binding
//! change (`perf` on a replica in etcd mode). So the map is split into shards by the name's
//! hash, each behind an `Arc`: a copy copies the shard pointers, and an edit copies only the
//! shard it touches. The shard count grows with the map (doubling, so that a map built one
//! namespace at a time — a replica importing a policy change by change — stays sharded), and
//! the name is hashed once per lookup: the shard comes from the middle bits of the same hash
//! the shard's table probes with.

use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;

/// A namespace's name and its partition (the index's `NamespacePartition`).
type Entry<P> = (Arc<str>, Arc<P>);

/// Namespaces per shard the map aims at: a shard is copied whole when one of its namespaces
/// changes.
const PER_SHARD: usize = 16;

/// The namespace partitions by name.
#[derive(Debug)]
pub struct NamespaceMap<P> {
    /// A power of two in number.
    shards: Box<[Arc<HashTable<Entry<P>>>]>,
    len: usize,
}

/// A copy shares every shard (no bound on the partitions: they are behind `Arc`s).
impl<P> Clone for NamespaceMap<P> {
    fn clone(&self) -> Self {
        NamespaceMap {
            shards: self.shards.clone(),
            len: self.len,
        }
    }
}

impl<P> Default for NamespaceMap<P> {
    fn default() -> Self {
        Self::with_shards(1)
    }
}

fn hash(name: &str) -> u64 {
    FxBuildHasher.hash_one(name)
}

impl<P> NamespaceMap<P> {
    fn with_shards(count: usize) -> Self {
        NamespaceMap {
            shards: (0..count).map(|_| Arc::new(HashTable::new())).collect(),
            len: 0,
        }
    }

    /// The shard of a hash: bits above those a shard's table uses for its buckets (the low
    /// ones) and below those it keeps as tags (the top seven).
    fn shard_of(&self, hash: u64) -> usize {
        (hash >> 32) as usize & (self.shards.len() - 1)
    }

    pub fn get(&self, name: &str) -> Option<&Arc<P>> {
        let hash = hash(name);
        self.shards[self.shard_of(hash)]
            .find(hash, |(key, _)| &**key == name)
            .map(|(_, partition)| partition)
    }

    /// Sets `name`'s partition (replacing one it had).
    pub fn insert(&mut self, name: Arc<str>, partition: Arc<P>) {
        if self.len >= self.shards.len() * PER_SHARD * 2 {
            self.reshard(self.shards.len() * 2);
        }
        let hash = hash(&name);
        let at = self.shard_of(hash);
        let shard = Arc::make_mut(&mut self.shards[at]);
        match shard.find_mut(hash, |(key, _)| *key == name) {
            Some(entry) => entry.1 = partition,
            None => {
                shard.insert_unique(hash, (name, partition), |(key, _)| self::hash(key));
                self.len += 1;
            }
        }
    }

    /// Removes `name`'s partition, if it has one.
    pub fn remove(&mut self, name: &str) {
        let hash = hash(name);
        let at = self.shard_of(hash);
        if self.shards[at]
            .find(hash, |(key, _)| &**key == name)
            .is_none()
        {
            return;
        }
        let shard = Arc::make_mut(&mut self.shards[at]);
        if let Ok(entry) = shard.find_entry(hash, |(key, _)| &**key == name) {
            entry.remove();
            self.len -= 1;
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every namespace and its partition, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &Arc<P>)> {
        self.shards
            .iter()
            .flat_map(|shard| shard.iter().map(|(name, partition)| (name, partition)))
    }

    /// Whether `self` and `other` share the shard that holds `name` (an edit of one of them
    /// copied it otherwise); for tests of sharing.
    pub fn shares_shard_of(&self, other: &NamespaceMap<P>, name: &str) -> bool {
        let hash = hash(name);
        self.shards.len() == other.shards.len()
            && Arc::ptr_eq(
                &self.shards[self.shard_of(hash)],
                &other.shards[other.shard_of(hash)],
            )
    }

    fn reshard(&mut self, count: usize) {
        let mut resharded = Self::with_shards(count);
        for (name, partition) in self.iter() {
            resharded.insert(Arc::clone(name), Arc::clone(partition));
        }
        *self = resharded;
    }
}

impl<P> FromIterator<Entry<P>> for NamespaceMap<P> {
    fn from_iter<I: IntoIterator<Item = Entry<P>>>(entries: I) -> Self {
        let entries: Vec<Entry<P>> = entries.into_iter().collect();
        let mut map = Self::with_shards((entries.len() / PER_SHARD).max(1).next_power_of_two());
        for (name, partition) in entries {
            map.insert(name, partition);
        }
        map
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Partitions told apart by address, as the index's are.
    type NamespacePartition = Vec<u8>;

    fn partition() -> Arc<NamespacePartition> {
        Arc::new(NamespacePartition::default())
    }

    /// Inserts, replacements and removals answer as a plain map would, through every
    /// resharding; a copy shares what neither side edits and never sees the other's edits.
    #[test]
    fn behaves_as_a_map_and_copies_share_untouched_shards() {
        let mut map = NamespaceMap::<NamespacePartition>::default();
        let mut model = std::collections::HashMap::new();
        for i in 0..2_000 {
            let (name, value): (Arc<str>, _) = (format!("ns-{i}").into(), partition());
            map.insert(Arc::clone(&name), Arc::clone(&value));
            model.insert(name, value);
            if i % 7 == 0 {
                let gone = format!("ns-{}", i / 2);
                map.remove(&gone);
                model.remove(gone.as_str());
            }
            if i % 5 == 0 {
                let replaced: Arc<str> = format!("ns-{}", i / 3).into();
                if model.contains_key(&replaced) {
                    let value = partition();
                    map.insert(Arc::clone(&replaced), Arc::clone(&value));
                    model.insert(replaced, value);
                }
            }
        }
        assert!(map.shards.len() > 1, "never resharded");
        assert_eq!(map.len(), model.len());
        assert_eq!(map.iter().count(), model.len());
        for i in 0..2_100 {
            let name = format!("ns-{i}");
            let (got, want) = (map.get(&name), model.get(name.as_str()));
            assert_eq!(got.is_some(), want.is_some(), "{name}");
            if let (Some(got), Some(want)) = (got, want) {
                assert!(Arc::ptr_eq(got, want), "{name}");
            }
        }

        let original = map.clone();
        let mut present = model.keys().map(|name| name.to_string());
        let (edited, removed) = (present.next().unwrap(), present.next().unwrap());
        let before = Arc::clone(original.get(&edited).unwrap());
        map.insert(edited.as_str().into(), partition());
        map.remove(&removed);
        assert!(Arc::ptr_eq(original.get(&edited).unwrap(), &before));
        assert!(!Arc::ptr_eq(map.get(&edited).unwrap(), &before));
        assert!(original.get(&removed).is_some() && map.get(&removed).is_none());
        assert_eq!((original.len(), map.len()), (model.len(), model.len() - 1));
        assert!(!map.shares_shard_of(&original, &edited));
        let untouched = (0..2_000)
            .map(|i| format!("ns-{i}"))
            .filter(|name| map.shares_shard_of(&original, name))
            .count();
        assert!(
            untouched > 1_500,
            "only {untouched} namespaces still shared"
        );
    }

    #[test]
    fn built_from_an_iterator_it_is_sharded_by_size() {
        let map: NamespaceMap<NamespacePartition> = (0..1_000)
            .map(|i| (Arc::from(format!("ns-{i}")), partition()))
            .collect();
        assert_eq!(map.len(), 1_000);
        assert_eq!(map.shards.len(), 64);
        assert!(map.get("ns-999").is_some() && map.get("ns-1000").is_none());
        assert!(NamespaceMap::<NamespacePartition>::default()
            .get("anything")
            .is_none());
    }
}
