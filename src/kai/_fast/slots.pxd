# Making objects of kai's slotted dataclasses without calling their __init__.
#
# Every object a session makes per pod (task, job, parsed pod, pod result) is a
# dataclass with __slots__: each field is a member descriptor at a fixed offset in the
# object. A generated __init__ costs a Python frame and an attribute store per field;
# here the object is allocated and its fields written at their offsets. layout()
# checks, when a module loads, that the class still has exactly the expected fields
# as object slots; a module whose check fails makes its objects through the class
# (see kai._fast.build), so a change of the model can slow these paths down but never
# make them wrong.

from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF, Py_XDECREF

cdef extern from "Python.h":
    ctypedef struct PyMemberDef:
        const char* name
        int type
        Py_ssize_t offset
        int flags
    ctypedef struct PyMemberDescrObject:
        PyMemberDef* d_member
    object PyType_GenericAlloc(type cls, Py_ssize_t nitems)

# structmember.h: an object slot that raises AttributeError while unset.
cdef enum:
    T_OBJECT_EX = 16


cdef inline object new_object(type cls):
    """An instance of ``cls`` with every slot unset (NULL)."""
    return PyType_GenericAlloc(cls, 0)


cdef inline void put(object obj, Py_ssize_t offset, object value) noexcept:
    """Set an unset slot of a new object (no reference is released)."""
    Py_INCREF(value)
    (<PyObject**>((<char*><PyObject*>obj) + offset))[0] = <PyObject*>value


cdef inline void replace(object obj, Py_ssize_t offset, object value) noexcept:
    """Set a slot of an object, releasing the value it held (if any)."""
    cdef PyObject** slot = <PyObject**>((<char*><PyObject*>obj) + offset)
    cdef PyObject* old = slot[0]
    Py_INCREF(value)
    slot[0] = <PyObject*>value
    Py_XDECREF(old)


# The error of an unset slot, out of line: get() stays small enough for the compiler to
# inline at its thousands of call sites (a field read is then a load and an increment).
cdef extern from *:
    """
    #if defined(__GNUC__)
    #define KAI_COLD __attribute__((noinline, cold))
    #else
    #define KAI_COLD
    #endif
    static KAI_COLD PyObject* kai_unset_field(PyObject* obj) {
        PyErr_Format(PyExc_AttributeError, "%s object has an unset field",
                     Py_TYPE(obj)->tp_name);
        return NULL;
    }
    """
    object kai_unset_field(object obj)


cdef inline object get(object obj, Py_ssize_t offset):
    """A slot's value (AttributeError while unset)."""
    cdef PyObject* value = (<PyObject**>((<char*><PyObject*>obj) + offset))[0]
    if value == NULL:
        return kai_unset_field(obj)
    return <object>value


cdef inline object field(object obj, bint direct, Py_ssize_t offset, str name):
    """A field of ``obj``: read at ``offset`` when ``direct`` (``obj``'s type is exactly
    the class the offset is of, see offsets_of), else looked up by ``name``."""
    return get(obj, offset) if direct else getattr(obj, name)


cdef inline bint layout(type cls, tuple names, Py_ssize_t* out) except -1:
    """Fill ``out`` with the offsets of ``names``, the fields of ``cls`` in order.

    False (``out`` partly filled) unless ``cls`` is a slotted dataclass with exactly
    these fields, each an object slot, made by object.__new__.
    """
    import dataclasses
    import types

    if not dataclasses.is_dataclass(cls) or cls.__new__ is not object.__new__:
        return False
    if tuple([f.name for f in dataclasses.fields(cls)]) != names:
        return False
    cdef Py_ssize_t i = 0
    cdef PyMemberDef* member
    for name in names:
        descr = cls.__dict__.get(name)
        if type(descr) is not types.MemberDescriptorType:
            return False
        member = (<PyMemberDescrObject*>descr).d_member
        if member.type != T_OBJECT_EX:
            return False
        out[i] = member.offset
        i += 1
    return True


cdef inline Py_ssize_t offset_of(type cls, str name) except -2:
    """The offset of ``cls``'s object slot ``name``; -1 when it is not one."""
    import types

    descr = cls.__dict__.get(name)
    if type(descr) is not types.MemberDescriptorType:
        return -1
    cdef PyMemberDef* member = (<PyMemberDescrObject*>descr).d_member
    return member.offset if member.type == T_OBJECT_EX else -1


cdef inline bint offsets_of(type cls, tuple names, Py_ssize_t* out) except -1:
    """Fill ``out`` with the offsets of ``cls``'s object slots ``names``, in order.

    False (``out`` partly filled) when one of them is not an object slot of ``cls``;
    an object is read at these offsets only if its type is exactly ``cls`` (a subclass
    may shadow a slot with a property).
    """
    cdef Py_ssize_t i
    for i in range(len(names)):
        out[i] = offset_of(cls, names[i])
        if out[i] < 0:
            return False
    return True


cdef inline object make(type cls, bint direct, const Py_ssize_t* offsets, tuple fields):
    """An instance of ``cls`` with ``fields`` in field order: written at ``offsets``
    when ``direct`` (see layout), else made by the class."""
    if not direct:
        return cls(*fields)
    obj = new_object(cls)
    cdef Py_ssize_t i
    for i in range(len(fields)):
        put(obj, offsets[i], fields[i])
    return obj
