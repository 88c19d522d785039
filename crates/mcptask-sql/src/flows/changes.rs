//! The wire form of the server-task change feed: batches of ids as
//! PostgreSQL `NOTIFY` payloads (see `ServerTaskStore::publish_changes`).

/// PostgreSQL refuses a `NOTIFY` payload of 8000 bytes or more; a batch of
/// ids is split into space-separated payloads that stay well under it.
const MAX_CHANGE_PAYLOAD: usize = 7_000;

/// `task_ids` as few space-separated payloads of at most [`MAX_CHANGE_PAYLOAD`]
/// bytes (an id is never split).
pub(crate) fn payloads(task_ids: &[String]) -> Vec<String> {
    let mut payloads = Vec::new();
    let mut current = String::new();
    for id in task_ids {
        if !current.is_empty() && current.len() + 1 + id.len() > MAX_CHANGE_PAYLOAD {
            payloads.push(std::mem::take(&mut current));
        }
        if !current.is_empty() {
            current.push(' ');
        }
        current.push_str(id);
    }
    if !current.is_empty() {
        payloads.push(current);
    }
    payloads
}

#[cfg(test)]
mod tests {
    use super::{MAX_CHANGE_PAYLOAD, payloads};

    #[test]
    fn a_large_batch_is_split_without_splitting_ids() {
        let ids: Vec<String> = (0..1_000).map(|i| format!("task-{i:032}")).collect();
        let batches = payloads(&ids);
        assert!(batches.len() > 1);
        assert!(batches.iter().all(|p| p.len() <= MAX_CHANGE_PAYLOAD));
        let rejoined: Vec<String> = batches
            .iter()
            .flat_map(|p| p.split(' ').map(str::to_string))
            .collect();
        assert_eq!(rejoined, ids);
        assert!(payloads(&[]).is_empty());
    }
}
