//! The integration tests of ichnos-image, built as one binary.
mod suite;
