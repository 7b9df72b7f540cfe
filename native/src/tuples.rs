//! NamedTuple instances filled in place, for the pieces that return many.
//!
//! A NamedTuple is a tuple subclass with no state of its own; calling it costs
//! a Python frame and a temporary tuple per instance. `fill` allocates the
//! instance and sets its items the way CPython's own `tuple.__new__` does for
//! a subclass, which is only sound for a class `check` accepted.

use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyType;

/// Refuses a class `fill` could not fill safely: it must be a tuple subclass of
/// `fields` fields that adds no instance state (a NamedTuple); `what` names it.
pub fn check(class: &Bound<'_, PyType>, fields: usize, what: &str) -> PyResult<()> {
    let count = class.getattr("_fields")?.len()?;
    let tp = class.as_ptr().cast::<ffi::PyTypeObject>();
    // SAFETY: reading plain fields of two live type objects.
    let tuple_like = unsafe {
        let tuple = std::ptr::addr_of_mut!(ffi::PyTuple_Type);
        ffi::PyType_IsSubtype(tp, tuple) != 0
            && (*tp).tp_basicsize == (*tuple).tp_basicsize
            && (*tp).tp_itemsize == (*tuple).tp_itemsize
            && (*tp).tp_dictoffset == 0
    };
    if count != fields || !tuple_like {
        return Err(PyValueError::new_err(format!(
            "{what} must be a NamedTuple of {fields} fields"
        )));
    }
    Ok(())
}

/// An instance of `class` (accepted by `check` with `N` fields) holding `items`.
pub fn fill<'py, const N: usize>(
    class: &Bound<'py, PyType>,
    items: [Bound<'py, PyAny>; N],
) -> PyResult<Bound<'py, PyAny>> {
    let py = class.py();
    let tp = class.as_ptr().cast::<ffi::PyTypeObject>();
    // SAFETY: `tp` is a live tuple subtype with the tuple's layout (see
    // `check`); a fresh tuple's slots are NULL until set, and every item is
    // an owned, non-NULL reference handed over to the tuple.
    unsafe {
        let alloc = (*tp).tp_alloc.unwrap_or(ffi::PyType_GenericAlloc);
        let object = alloc(tp, N as ffi::Py_ssize_t);
        if object.is_null() {
            return Err(PyErr::fetch(py));
        }
        for (index, item) in items.into_iter().enumerate() {
            ffi::PyTuple_SET_ITEM(object, index as ffi::Py_ssize_t, item.into_ptr());
        }
        Ok(Bound::from_owned_ptr(py, object))
    }
}

/// Where `name` stands in a NamedTuple's `_fields` (`names`); an error naming what is missing.
pub fn position(names: &[String], name: &str) -> PyResult<usize> {
    names
        .iter()
        .position(|n| n == name)
        .ok_or_else(|| PyValueError::new_err(format!("the fields {names:?} lack {name:?}")))
}
