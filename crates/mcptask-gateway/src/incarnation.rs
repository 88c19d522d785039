//! This process's identity on its store: the process slot its tracker and
//! call runtime are named after. The rule (take the lowest free slot, let
//! its earlier incarnations' leases and claims lapse at once, carry on
//! without one when none can be taken or it is lost) is the task runtime's,
//! [`mcptask_server::Incarnation`]; the gateway takes the slot before its
//! tracker starts claiming and hands it to the call runtime.

pub use mcptask_server::Incarnation;
