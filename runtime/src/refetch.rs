//! Placeholder: the single-flight, cooldown-bounded refetch gate (written next).
