//! The Python client's tests (clients/python), run against real nodes (issue 55).
