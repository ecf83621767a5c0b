//! Human in the loop: approvals, questions and client tools, their clients, crashes while waiting, and breakpoints.

mod breakpoints;
mod hitl_client;
mod hitl_crash;
mod interrupts;
