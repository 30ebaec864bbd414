//! The CHORUS simulator (work in progress): engines, scenarios, checker and traces.
