//! ACL changes through the controller (filled in with the metadata log).
