//! Point-to-point calls on typed slices: any [`bytemuck::Pod`] element type
//! (plain numbers, arrays of them, `#[derive(Pod)]` structs without
//! padding), sent as its bytes. Statuses count bytes, as everywhere.

use super::{Comm, Request, Scope, Tag};
use crate::error::Result;
use crate::progress::Status;
use bytemuck::Pod;

impl Comm {
    /// [`send`](Self::send) of a typed slice.
    ///
    /// ```
    /// use tandem_driver::{Comm, Config, Layout};
    /// let out = Comm::threads(2, &Layout::default(), Config::default(), |comm| {
    ///     let mut got = [0f64; 3];
    ///     if comm.rank() == 0 {
    ///         comm.send_typed(&[1.5f64, 2.5, 3.5], 1, 0)?;
    ///     } else {
    ///         let st = comm.recv_typed(&mut got, 0, 0)?;
    ///         assert_eq!(st.len, 24); // bytes
    ///     }
    ///     Ok(got)
    /// });
    /// assert_eq!(out[1].as_ref().unwrap(), &[1.5, 2.5, 3.5]);
    /// ```
    ///
    /// # Errors
    /// As [`send`](Self::send).
    pub fn send_typed<T: Pod>(&self, buf: &[T], dst: usize, tag: Tag) -> Result<()> {
        self.send(bytemuck::cast_slice(buf), dst, tag)
    }

    /// [`ssend`](Self::ssend) of a typed slice.
    ///
    /// # Errors
    /// As [`ssend`](Self::ssend).
    pub fn ssend_typed<T: Pod>(&self, buf: &[T], dst: usize, tag: Tag) -> Result<()> {
        self.ssend(bytemuck::cast_slice(buf), dst, tag)
    }

    /// [`recv`](Self::recv) into a typed slice; the status's `len` is in
    /// bytes. A message whose length is not a whole number of elements
    /// leaves the last element partly written.
    ///
    /// # Errors
    /// As [`recv`](Self::recv).
    pub fn recv_typed<T: Pod>(&self, buf: &mut [T], src: usize, tag: Tag) -> Result<Status> {
        self.recv(bytemuck::cast_slice_mut(buf), src, tag)
    }
}

impl<'s, 'env> Scope<'s, 'env> {
    /// [`isend`](Self::isend) of a typed slice.
    ///
    /// # Errors
    /// As [`isend`](Self::isend).
    pub fn isend_typed<T: Pod>(
        &'s self,
        buf: &'env [T],
        dst: usize,
        tag: Tag,
    ) -> Result<Request<'s>> {
        self.isend(bytemuck::cast_slice(buf), dst, tag)
    }

    /// [`irecv`](Self::irecv) into a typed slice (the status counts bytes).
    ///
    /// # Errors
    /// As [`irecv`](Self::irecv).
    pub fn irecv_typed<T: Pod>(
        &'s self,
        buf: &'env mut [T],
        src: usize,
        tag: Tag,
    ) -> Result<Request<'s>> {
        self.irecv(bytemuck::cast_slice_mut(buf), src, tag)
    }
}
