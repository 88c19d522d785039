//! The dialect seam: everything the store flows need from a database, and
//! nothing more.
//!
//! A flow (claim, fenced apply, finish, …) is written once against
//! [`Backend`]. A backend supplies, through [`Dialect`], only what truly
//! differs between SQLite and PostgreSQL: its named statements, how a write
//! transaction starts, how a list parameter is bound, and whether it can push
//! cross-process signals. The generic execution and row access are derived
//! from sqlx once, by the blanket impl below, so no backend repeats them.

use std::borrow::Cow;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use mcptask_core::StoreError;
use sqlx::query::Query;
use sqlx::{AssertSqlSafe, ColumnIndex, Database, Decode, Encode, Executor, Pool, Row, Type};

use super::sql::Statements;
use crate::error::db_err;

/// SQL text: a named statement, or one assembled at run time (list filters).
pub type Sql = Cow<'static, str>;

/// A statement parameter. Flows bind plain values; each backend decides how a
/// list travels (a PostgreSQL array, a JSON array for SQLite's `json_each`).
#[derive(Debug, Clone)]
pub enum Arg<'a> {
    /// An integer (timestamps, counters, limits).
    Int(i64),
    /// An integer or NULL.
    OptInt(Option<i64>),
    /// A borrowed text.
    Text(&'a str),
    /// A borrowed text or NULL.
    OptText(Option<&'a str>),
    /// A text made for this statement (JSON, mostly).
    Owned(String),
    /// A text made for this statement, or NULL.
    OptOwned(Option<String>),
    /// A boolean.
    Bool(bool),
    /// A list of texts, bound as one parameter.
    TextList(Vec<&'a str>),
    /// A list of integers, bound as one parameter.
    IntList(Vec<i64>),
}

macro_rules! arg_from {
    ($($ty:ty => |$v:ident| $arg:expr),* $(,)?) => {
        $(impl<'a> From<$ty> for Arg<'a> {
            fn from($v: $ty) -> Self {
                $arg
            }
        })*
    };
}

arg_from! {
    i64 => |v| Arg::Int(v),
    Option<i64> => |v| Arg::OptInt(v),
    &'a str => |v| Arg::Text(v),
    &'a String => |v| Arg::Text(v),
    Option<&'a str> => |v| Arg::OptText(v),
    &'a Option<String> => |v| Arg::OptText(v.as_deref()),
    String => |v| Arg::Owned(v),
    Option<String> => |v| Arg::OptOwned(v),
    bool => |v| Arg::Bool(v),
}

/// `args![a, b, …]`: statement parameters `$1, $2, …` in order.
macro_rules! args {
    ($($arg:expr),* $(,)?) => {
        vec![$($crate::flows::backend::Arg::from($arg)),*]
    };
}
pub(crate) use args;

/// A sqlx query on backend `D`, before execution.
pub type DbQuery<D> = Query<'static, D, <D as Database>::Arguments>;

/// Which rows a change feed carries: the call runtime's server tasks, or
/// the tracker's remote tasks. Each is its own channel, so a listener of
/// one never re-reads rows of the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Feed {
    /// `server_tasks` rows (the `subscriptions/listen` streams).
    ServerTasks,
    /// `remote_tasks` rows (the tracker's waiters and live views).
    RemoteTasks,
    /// `admin_config` rows (every replica re-reads and applies them).
    AdminConfig,
}

/// What differs between backends. Implemented by hand for `sqlx::Sqlite` and
/// `sqlx::Postgres`; the flows never see more than this.
pub trait Dialect: Database + Sized {
    /// Every statement the flows run, by name.
    const SQL: &'static Statements;

    /// Create transactions worth running side by side (see
    /// `ServerTaskStore::create_writers`).
    const CREATE_WRITERS: usize;

    /// Start a transaction that will write (SQLite takes the database write
    /// lock up front; PostgreSQL locks rows as statements touch them).
    fn begin_write(
        pool: &Pool<Self>,
    ) -> BoxFuture<'_, Result<sqlx::Transaction<'static, Self>, StoreError>>;

    /// Take the lowest free process slot of `store`'s database
    /// (`crate::slot`): a file lock beside a SQLite file, an advisory lock
    /// on a PostgreSQL session of its own. `None`: every slot is held, or
    /// the database has no file to lock beside (in memory).
    fn take_slot(
        store: &super::SqlStore<Self>,
    ) -> BoxFuture<'_, Result<Option<crate::slot::Slot>, StoreError>>;

    /// Apply this backend's pending migrations.
    fn migrate(pool: &Pool<Self>) -> BoxFuture<'_, Result<(), sqlx::migrate::MigrateError>>;

    /// This backend's migrations.
    fn migrator() -> &'static sqlx::migrate::Migrator;

    /// Bind a list of texts as one parameter.
    fn bind_texts(query: DbQuery<Self>, list: Vec<&str>) -> DbQuery<Self>;

    /// Bind a list of integers as one parameter.
    fn bind_ints(query: DbQuery<Self>, list: Vec<i64>) -> DbQuery<Self>;

    /// Rows a write statement changed.
    fn rows_affected(result: &Self::QueryResult) -> u64;

    /// Cross-process wake-ups for server tasks (ids), where the backend has a
    /// push channel; `None` where only the owners' periodic re-check applies.
    fn listen_signals(
        pool: &Pool<Self>,
    ) -> BoxFuture<'_, Result<Option<BoxStream<'static, String>>, StoreError>>;

    /// Publish changed task ids of `feed` to every store on this database
    /// that listens (every replica on PostgreSQL; the stores of this
    /// process on the same SQLite file).
    fn publish_changes(
        pool: &Pool<Self>,
        feed: Feed,
        task_ids: Vec<String>,
    ) -> BoxFuture<'_, Result<(), StoreError>>;

    /// The changes published on `feed` on this database (batches of task
    /// ids; an empty batch: some may have been lost).
    fn listen_changes(
        pool: &Pool<Self>,
        feed: Feed,
    ) -> BoxFuture<'_, Result<Option<BoxStream<'static, Vec<String>>>, StoreError>>;
}

/// A database the flows can run on: a [`Dialect`] plus generic execution and
/// typed column access. Implemented for every dialect sqlx can drive.
pub trait Backend: Prepare {
    /// Run a write statement; returns the rows changed.
    fn execute<'c>(
        conn: &'c mut Self::Connection,
        sql: impl Into<Sql>,
        args: Vec<Arg<'c>>,
    ) -> BoxFuture<'c, Result<u64, StoreError>>;

    /// Every row a statement returns.
    fn fetch_all<'c>(
        conn: &'c mut Self::Connection,
        sql: impl Into<Sql>,
        args: Vec<Arg<'c>>,
    ) -> BoxFuture<'c, Result<Vec<Self::Row>, StoreError>>;

    /// The first row a statement returns, if any.
    fn fetch_optional<'c>(
        conn: &'c mut Self::Connection,
        sql: impl Into<Sql>,
        args: Vec<Arg<'c>>,
    ) -> BoxFuture<'c, Result<Option<Self::Row>, StoreError>>;

    /// Read a column by name.
    fn column<T: Column>(row: &Self::Row, name: &str) -> Result<T, StoreError> {
        T::read::<Self>(row, name)
    }

    #[doc(hidden)]
    fn text(row: &Self::Row, name: &str) -> Result<String, StoreError>;
    #[doc(hidden)]
    fn opt_text(row: &Self::Row, name: &str) -> Result<Option<String>, StoreError>;
    #[doc(hidden)]
    fn int(row: &Self::Row, name: &str) -> Result<i64, StoreError>;
    #[doc(hidden)]
    fn opt_int(row: &Self::Row, name: &str) -> Result<Option<i64>, StoreError>;
    #[doc(hidden)]
    fn flag(row: &Self::Row, name: &str) -> Result<bool, StoreError>;
}

/// A Rust type a column decodes to.
pub trait Column: Sized {
    /// Read column `name` of `row` as this type.
    fn read<B: Backend>(row: &B::Row, name: &str) -> Result<Self, StoreError>;
}

macro_rules! columns {
    ($($ty:ty => $getter:ident),* $(,)?) => {
        $(impl Column for $ty {
            fn read<B: Backend>(row: &B::Row, name: &str) -> Result<Self, StoreError> {
                B::$getter(row, name)
            }
        })*
    };
}

columns! {
    String => text,
    Option<String> => opt_text,
    i64 => int,
    Option<i64> => opt_int,
    bool => flag,
}

/// Turning SQL and [`Arg`]s into a sqlx query: every dialect whose scalar
/// types encode like this can.
pub trait Prepare: Dialect {
    /// The query for `sql` with `args` bound as `$1, $2, …`.
    fn prepare(sql: Sql, args: Vec<Arg<'_>>) -> DbQuery<Self>;
}

impl<D> Prepare for D
where
    D: Dialect,
    for<'q> &'q str: Encode<'q, D> + Type<D>,
    for<'q> Option<&'q str>: Encode<'q, D> + Type<D>,
    for<'q> i64: Encode<'q, D> + Type<D>,
    for<'q> Option<i64>: Encode<'q, D> + Type<D>,
    for<'q> bool: Encode<'q, D> + Type<D>,
{
    fn prepare(sql: Sql, args: Vec<Arg<'_>>) -> DbQuery<D> {
        args.into_iter()
            .fold(sqlx::query(AssertSqlSafe(sql)), |query, arg| match arg {
                Arg::Int(v) => query.bind(v),
                Arg::OptInt(v) => query.bind(v),
                Arg::Text(v) => query.bind(v),
                Arg::OptText(v) => query.bind(v),
                Arg::Owned(v) => query.bind(v.as_str()),
                Arg::OptOwned(v) => query.bind(v.as_deref()),
                Arg::Bool(v) => query.bind(v),
                Arg::TextList(v) => D::bind_texts(query, v),
                Arg::IntList(v) => D::bind_ints(query, v),
            })
    }
}

fn read<'r, D, T>(row: &'r D::Row, name: &str) -> Result<T, StoreError>
where
    D: Database,
    for<'a> &'a str: ColumnIndex<D::Row>,
    T: Decode<'r, D> + Type<D>,
{
    row.try_get(name)
        .map_err(|e| StoreError::Corrupt(format!("column {name}: {e}")))
}

// The one place the sqlx trait bounds are spelled out: every backend whose
// types encode and decode like this gets the generic execution for free.
impl<D> Backend for D
where
    D: Prepare,
    for<'c> &'c mut D::Connection: Executor<'c, Database = D>,
    D::Arguments: sqlx::IntoArguments<D>,
    i64: Type<D>,
    bool: Type<D>,
    for<'r> String: Decode<'r, D>,
    for<'r> Option<String>: Decode<'r, D>,
    for<'r> i64: Decode<'r, D>,
    for<'r> Option<i64>: Decode<'r, D>,
    for<'r> bool: Decode<'r, D>,
    String: Type<D>,
    for<'a> &'a str: ColumnIndex<D::Row>,
{
    fn execute<'c>(
        conn: &'c mut D::Connection,
        sql: impl Into<Sql>,
        args: Vec<Arg<'c>>,
    ) -> BoxFuture<'c, Result<u64, StoreError>> {
        let query = D::prepare(sql.into(), args);
        Box::pin(async move {
            let done = query.execute(conn).await.map_err(db_err)?;
            Ok(D::rows_affected(&done))
        })
    }

    fn fetch_all<'c>(
        conn: &'c mut D::Connection,
        sql: impl Into<Sql>,
        args: Vec<Arg<'c>>,
    ) -> BoxFuture<'c, Result<Vec<D::Row>, StoreError>> {
        let query = D::prepare(sql.into(), args);
        Box::pin(async move { query.fetch_all(conn).await.map_err(db_err) })
    }

    fn fetch_optional<'c>(
        conn: &'c mut D::Connection,
        sql: impl Into<Sql>,
        args: Vec<Arg<'c>>,
    ) -> BoxFuture<'c, Result<Option<D::Row>, StoreError>> {
        let query = D::prepare(sql.into(), args);
        Box::pin(async move { query.fetch_optional(conn).await.map_err(db_err) })
    }

    fn text(row: &D::Row, name: &str) -> Result<String, StoreError> {
        read::<D, String>(row, name)
    }
    fn opt_text(row: &D::Row, name: &str) -> Result<Option<String>, StoreError> {
        read::<D, Option<String>>(row, name)
    }
    fn int(row: &D::Row, name: &str) -> Result<i64, StoreError> {
        read::<D, i64>(row, name)
    }
    fn opt_int(row: &D::Row, name: &str) -> Result<Option<i64>, StoreError> {
        read::<D, Option<i64>>(row, name)
    }
    fn flag(row: &D::Row, name: &str) -> Result<bool, StoreError> {
        read::<D, bool>(row, name)
    }
}
