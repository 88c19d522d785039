//! `mcptask_server::task_manager`, rmcp's `TaskManager` API over the durable
//! runtime: the same handler code on rmcp's manager and on ours answers the
//! same ([`same_handler`]), and the `rmcp_task_server` example, run as real
//! processes, passes the conformance suite's task scenarios on SQLite and
//! PostgreSQL, survives SIGKILL and is served by two replicas ([`example`]);
//! restarted at once, it adopts its previous incarnation's work at once, and
//! two live processes never adopt each other's ([`incarnation`]); rmcp's
//! exported names mean the same here ([`drop_in`]); and that example is the
//! rmcp server `rmcp_task_server_before` with the migration guide's patch
//! applied, the patch the guide shows, and that rmcp server passes the same
//! scenarios on rmcp's own manager ([`migration_patch`]).

mod drop_in;
mod example;
mod incarnation;
mod migration_patch;
mod same_handler;
