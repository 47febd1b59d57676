//! Where the fields retagfs reads and writes sit in the kernel's FUSE
//! structs (`include/uapi/linux/fuse.h`). Every field is in the host's
//! byte order.

/// `struct fuse_in_header`, in front of every request read from
/// `/dev/fuse`: its size and fields.
pub(crate) mod in_header {
    pub(crate) const SIZE: usize = 40;
    pub(crate) const OPCODE: usize = 4;
    pub(crate) const UNIQUE: usize = 8;
    pub(crate) const NODEID: usize = 16;
}

/// `struct fuse_out_header`, in front of every answer.
pub(crate) mod out_header {
    pub(crate) const SIZE: usize = 16;
    pub(crate) const LEN: usize = 0;
    pub(crate) const ERROR: usize = 4;
    pub(crate) const UNIQUE: usize = 8;
}

/// `struct fuse_open_in` (open and opendir).
pub(crate) mod open_in {
    pub(crate) const FLAGS: usize = 0;
}

/// `struct fuse_read_in` (read, readdir and readdirplus).
pub(crate) mod read_in {
    pub(crate) const FH: usize = 0;
    pub(crate) const OFFSET: usize = 8;
    pub(crate) const SIZE: usize = 16;
}

/// `struct fuse_release_in`.
pub(crate) mod release_in {
    pub(crate) const FH: usize = 0;
}
