//! The change feed on SQLite: in-process, shared by every store this process
//! opened on the same file.
//!
//! One process per file is how SQLite is deployed, so there is no
//! cross-process channel; but a process may run several runtimes on one file
//! (replicas in tests, a gateway and a server together), and each must see
//! the others' changes, as PostgreSQL replicas do through `NOTIFY`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{LazyLock, Mutex};

use futures::StreamExt;
use futures::stream::BoxStream;
use sqlx::{Pool, Sqlite};
use tokio::sync::broadcast;

use crate::flows::backend::Feed;

/// Batches a slow listener may fall behind by before it is told that it
/// missed some (an empty batch).
const CAPACITY: usize = 1024;

type Feeds = Mutex<HashMap<(PathBuf, Feed), broadcast::Sender<Vec<String>>>>;

/// One channel per database file and feed in this process.
static FEEDS: LazyLock<Feeds> = LazyLock::new(Default::default);

fn feed(pool: &Pool<Sqlite>, which: Feed) -> broadcast::Sender<Vec<String>> {
    let file = pool.connect_options().get_filename().to_path_buf();
    let mut feeds = FEEDS.lock().unwrap_or_else(|e| e.into_inner());
    // Feeds nobody listens to any more are dropped as others are made.
    feeds.retain(|_, sender| sender.receiver_count() > 0);
    feeds
        .entry((file, which))
        .or_insert_with(|| broadcast::channel(CAPACITY).0)
        .clone()
}

/// Publish `task_ids` to the listeners of `which` on `pool`'s file.
pub(super) fn publish(pool: &Pool<Sqlite>, which: Feed, task_ids: Vec<String>) {
    let _ = feed(pool, which).send(task_ids);
}

/// Listen to the changes of `which` published on `pool`'s file.
pub(super) fn listen(pool: &Pool<Sqlite>, which: Feed) -> BoxStream<'static, Vec<String>> {
    let receiver = feed(pool, which).subscribe();
    futures::stream::unfold(receiver, |mut receiver| async move {
        match receiver.recv().await {
            Ok(batch) => Some((batch, receiver)),
            Err(broadcast::error::RecvError::Lagged(_)) => Some((Vec::new(), receiver)),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    })
    .boxed()
}
