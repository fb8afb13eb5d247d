# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled conversion of Pod, PodGroup and Node manifests (``kai.snapshot.loader``).

``add_items`` takes the items of a ``List`` document, ``add`` one object. A pod, pod
group or node of the usual shape (string maps, containers with plain requests and
limits, no affinity, init containers or deletion; for a pod group, no owners; for a
node, string fields where the loader also reads other scalars) is converted here: each
distinct timestamp and quantity text is parsed once per load, and the object is
written slot by slot (``kai/_fast/slots.pxd``). Anything else, including every input
error, goes to the Python loader, which converts it or raises the error naming the
file, document, object and field: results and messages are the Python loader's.
"""

from datetime import datetime

from kai.api.objects import (
    EMPTY_MAP,
    NodeObject,
    OwnerReference,
    PodGroupObject,
    PodObject,
    Source,
    Taint,
    Toleration,
)
from kai.api.quantity import parse_quantity, parse_time, to_canonical
from kai.snapshot.loader import (
    ANNOTATION_LAST_EVICTION,
    ANNOTATION_LAST_START,
    ANNOTATION_STALE,
    API_GROUPS_KAI,
    PRESSURE_CONDITIONS,
)

from libc.math cimport signbit

from kai._fast.slots cimport layout, make

cdef tuple POD_FIELDS = (
    "name", "namespace", "uid", "labels", "annotations", "owner_references",
    "creation_timestamp", "deletion_timestamp", "scheduler_name", "node_name",
    "priority", "priority_class_name", "node_selector", "required_node_affinity",
    "preferred_node_affinity", "tolerations", "requests", "limits", "phase",
    "conditions", "condition_times", "nominated_node_name", "scheduling_gates",
    "start_time", "source",
)
cdef tuple GROUP_FIELDS = (
    "name", "namespace", "uid", "labels", "annotations", "owner_references",
    "creation_timestamp", "min_member", "queue", "priority_class_name",
    "preemptibility", "staleness_grace_period", "preemption_delay",
    "last_start_timestamp", "stale_timestamp", "last_eviction_timestamp", "source",
)
cdef tuple NODE_FIELDS = (
    "name", "labels", "annotations", "taints", "unschedulable", "allocatable", "ready",
    "pressure_conditions", "source",
)
cdef Py_ssize_t POD_OFF[25]
cdef Py_ssize_t GROUP_OFF[17]
cdef Py_ssize_t NODE_OFF[9]
cdef bint POD_DIRECT = layout(PodObject, POD_FIELDS, POD_OFF)
cdef bint GROUP_DIRECT = layout(PodGroupObject, GROUP_FIELDS, GROUP_OFF)
cdef bint NODE_DIRECT = layout(NodeObject, NODE_FIELDS, NODE_OFF)

cdef tuple KAI_GROUPS = tuple(f"{g}/" for g in API_GROUPS_KAI)
cdef object NO = object()  # "not the usual shape": the Python loader takes the object
cdef tuple EMPTY = ()
cdef object fromisoformat = datetime.fromisoformat


cdef inline bint plain_utc(str value):
    """``kai.api.quantity._is_plain_utc``: the shape (``2024-05-01T12:00:00Z``) that
    parse_time reads with ``datetime.fromisoformat`` before anything else."""
    return (
        len(value) == 20 and value[19] == u"Z" and value[10] == u"T" and value[4] == u"-"
        and value[7] == u"-" and value[13] == u":" and value[16] == u":"
    )


cdef class _Cache:
    """What one load parses once: timestamps, quantities, the source of a document."""

    cdef dict times
    cdef dict quantities  # resource name -> quantity string -> value in canonical units
    cdef Py_ssize_t quantity_count
    cdef object file, document, source

    def __init__(self):
        self.times = {}
        self.quantities = {}
        self.quantity_count = 0
        self.file = self.document = self.source = None

    def __len__(self):
        return len(self.times) + self.quantity_count

    cdef object time(self, object value):
        """A timestamp string as a datetime, None if absent, NO if not usual."""
        if value is None:
            return None
        if type(value) is not str:
            return NO
        found = self.times.get(value)
        if found is None:
            if value == "":
                return None
            found = None
            if plain_utc(value):
                # parse_time's first step, without its call: the rest of it (below)
                # takes what this refuses, with its own results and errors.
                try:
                    found = fromisoformat(value)
                except ValueError:
                    pass
            if found is None:
                try:
                    found = parse_time(value)
                except ValueError:
                    return NO
            self.times[value] = found
        return found

    cdef object resources(self, object value):
        """A ResourceList in canonical units, a new map, or NO."""
        if value is None:
            return {}
        if type(value) is not dict:
            return NO
        cdef dict out = {}
        cdef dict parsed
        for name, raw in (<dict>value).items():
            if type(name) is not str:
                return NO
            parsed = None
            q = None
            if type(raw) is str:
                parsed = self.quantities.get(name)
                if parsed is None:
                    parsed = self.quantities[name] = {}
                q = parsed.get(raw)
            if q is None:
                try:
                    q = parse_quantity(raw, what=name)
                except ValueError:
                    return NO
                if q < 0:
                    return NO
                q = to_canonical(name, q)
                if parsed is not None:
                    parsed[raw] = q
                    self.quantity_count += 1
            out[name] = q
        return out

    cdef object source_of(self, object file, object document):
        if self.source is None or file is not self.file or document != self.document:
            self.file = file
            self.document = document
            self.source = Source(file, document)
        return self.source


cdef inline object str_map(object value):
    """metadata.labels and the like: a copy of a map of strings, or NO."""
    if value is None:
        return EMPTY_MAP
    if type(value) is not dict:
        return NO
    for k, v in (<dict>value).items():
        if type(k) is not str or type(v) is not str:
            return NO
    return dict(<dict>value) if value else EMPTY_MAP


cdef inline bint empty_list(object value):
    return value is None or (type(value) is list and not value)


cdef inline object opt_str(object value):
    """An optional string field: the string, None if absent, NO if not a string."""
    if value is None or type(value) is str:
        return value
    return NO


cdef object container_resources(_Cache cache, object c):
    """(requests, limits) of one plain container, new maps, or NO."""
    if type(c) is not dict:
        return NO
    res = (<dict>c).get("resources")
    if not res:
        if res is not None and type(res) is not dict:
            return NO
        return {}, {}
    if type(res) is not dict:
        return NO
    req = cache.resources((<dict>res).get("requests"))
    lim = cache.resources((<dict>res).get("limits"))
    if req is NO or lim is NO:
        return NO
    for k, v in (<dict>lim).items():
        if k not in req:
            req[k] = v  # Kubernetes defaults a missing request to the limit
    return req, lim


cdef bint no_negative_zero(dict values) except -1:
    """Whether no value is -0.0 (a sum that starts at 0.0 would make it 0.0)."""
    cdef double x
    for v in values.values():
        x = v
        if x == 0.0 and signbit(x):
            return False
    return True


cdef object pod_resources(_Cache cache, object containers):
    """(requests, limits) of plain containers (kai.snapshot.loader._pod_resources)."""
    if type(containers) is not list:
        return NO
    if len(<list>containers) == 1:
        # One container (most pods): its maps are the sums, as they are made here.
        parts = container_resources(cache, (<list>containers)[0])
        if parts is NO:
            return NO
        if no_negative_zero((<tuple>parts)[0]) and no_negative_zero((<tuple>parts)[1]):
            return parts
    cdef dict total = {}
    cdef dict limits = {}
    cdef set limited = None
    for c in <list>containers:
        parts = container_resources(cache, c)
        if parts is NO:
            return NO
        req, lim = <tuple>parts
        for k, v in (<dict>req).items():
            total[k] = total.get(k, 0.0) + v
        for k, v in (<dict>lim).items():
            limits[k] = limits.get(k, 0.0) + v
        if limited is None:
            limited = set(lim)
        else:
            limited &= (<dict>lim).keys()
    if limited is not None and len(limited) != len(limits):
        limits = {k: v for k, v in limits.items() if k in limited}
    return total, limits


cdef object meta_name(object meta):
    """(name, namespace) of usual metadata, or NO."""
    if type(meta) is not dict:
        return NO
    name = (<dict>meta).get("name")
    namespace = (<dict>meta).get("namespace")
    if type(name) is not str or not name:
        return NO
    if namespace is None or namespace == "":
        namespace = "default"
    elif type(namespace) is not str:
        return NO
    return name, namespace


cdef object string_rows(object value, tuple names):
    """The named fields of each map of a list, as a tuple per map: strings, or None
    where absent.  NO unless ``value`` is a list of maps whose named fields are."""
    if type(value) is not list:
        return NO
    cdef list rows = []
    cdef list row
    for item in <list>value:
        if type(item) is not dict:
            return NO
        row = []
        for name in names:
            field = (<dict>item).get(name)
            if field is not None and type(field) is not str:
                return NO
            row.append(field)
        rows.append(tuple(row))
    return rows


cdef tuple TOLERATION_FIELDS = ("key", "operator", "value", "effect")
cdef tuple TAINT_FIELDS = ("key", "value", "effect")
cdef tuple CONDITION_FIELDS = ("type", "status")


cdef object tolerations(object value):
    """spec.tolerations as the loader reads them (tolerationSeconds is not), or NO."""
    if not value:
        return EMPTY
    rows = string_rows(value, TOLERATION_FIELDS)
    if rows is NO:
        return NO
    return tuple([
        Toleration(key or "", operator or "Equal", val or "", effect or "")
        for key, operator, val, effect in <list>rows
    ])


cdef object owner_references(object value):
    """metadata.ownerReferences as the loader reads them, or NO."""
    if not value:
        return EMPTY
    if type(value) is not list:
        return NO
    out = []
    for ref in <list>value:
        if type(ref) is not dict:
            return NO
        kind = (<dict>ref).get("kind")
        name = (<dict>ref).get("name")
        uid = opt_str((<dict>ref).get("uid"))
        controller = (<dict>ref).get("controller")
        if type(kind) is not str or not kind or type(name) is not str or not name:
            return NO
        if uid is NO or (controller is not None and type(controller) is not bool):
            return NO
        out.append(OwnerReference(kind, name, uid or "", controller is True))
    return tuple(out)


cdef object conditions(_Cache cache, object value):
    """(type -> status, type -> lastTransitionTime) of status.conditions, or NO."""
    if value is None:
        return EMPTY_MAP, EMPTY_MAP
    if type(value) is not list:
        return NO
    cdef dict statuses = {}
    cdef dict times = {}
    for cond in <list>value:
        if type(cond) is not dict:
            return NO
        ctype = opt_str((<dict>cond).get("type"))
        status = opt_str((<dict>cond).get("status"))
        ts = cache.time((<dict>cond).get("lastTransitionTime"))
        if ctype is NO or status is NO or ts is NO:
            return NO
        if not ctype:
            continue
        statuses[ctype] = status or ""
        if ts is not None:
            times[ctype] = ts
    return (statuses or EMPTY_MAP), (times or EMPTY_MAP)


cdef object spec_and_status(dict obj):
    """(spec, status) of a manifest, each a map ({} when absent), or NO."""
    spec = obj.get("spec")
    status = obj.get("status")
    if spec is None:
        spec = {}
    if status is None:
        status = {}
    if type(spec) is not dict or type(status) is not dict:
        return NO
    return spec, status


cdef object pod(_Cache cache, dict obj, dict meta, str name, str namespace, object source):
    """The PodObject of a usual Pod manifest, or NO."""
    if meta.get("deletionTimestamp") is not None:
        return NO
    parts = spec_and_status(obj)
    if parts is NO:
        return NO
    spec, status = <tuple>parts
    for key in ("affinity", "initContainers", "overhead"):
        if (<dict>spec).get(key):
            return NO
    # Lists the loader checks even when empty: absent or [] only.
    if not empty_list((<dict>spec).get("schedulingGates")):
        return NO
    owners = owner_references(meta.get("ownerReferences"))
    tolerated = tolerations((<dict>spec).get("tolerations"))
    conds = conditions(cache, (<dict>status).get("conditions"))
    containers = (<dict>spec).get("containers")
    resources = pod_resources(cache, [] if containers is None else containers)
    uid = opt_str(meta.get("uid"))
    labels = str_map(meta.get("labels"))
    annotations = str_map(meta.get("annotations"))
    created = cache.time(meta.get("creationTimestamp"))
    scheduler = opt_str((<dict>spec).get("schedulerName"))
    node_name = opt_str((<dict>spec).get("nodeName"))
    priority = (<dict>spec).get("priority")
    priority_class = opt_str((<dict>spec).get("priorityClassName"))
    node_selector = str_map((<dict>spec).get("nodeSelector"))
    phase = opt_str((<dict>status).get("phase"))
    nominated = opt_str((<dict>status).get("nominatedNodeName"))
    started = cache.time((<dict>status).get("startTime"))
    if (
        resources is NO or uid is NO or labels is NO or annotations is NO or created is NO
        or scheduler is NO or node_name is NO or priority_class is NO
        or node_selector is NO or phase is NO or nominated is NO or started is NO
        or owners is NO or tolerated is NO or conds is NO
        or (priority is not None and type(priority) is not int)
    ):
        return NO
    requests, limits = <tuple>resources
    condition_statuses, condition_times = <tuple>conds
    fields = (
        name, namespace, uid or "", labels, annotations, owners, created, None,
        scheduler or "default-scheduler", node_name or None, priority,
        priority_class or None, node_selector, None, EMPTY, tolerated, requests, limits,
        phase or "Pending", condition_statuses, condition_times, nominated or None, EMPTY,
        started, source,
    )
    return make(PodObject, POD_DIRECT, POD_OFF, fields)


cdef object pod_group(_Cache cache, dict obj, dict meta, str name, str namespace,
                      object source):
    """The PodGroupObject of a usual PodGroup manifest, or NO."""
    if meta.get("ownerReferences"):
        return NO
    spec = obj.get("spec")
    if spec is None:
        spec = {}
    if type(spec) is not dict:
        return NO
    if (
        (<dict>spec).get("stalenessGracePeriod") is not None
        or (<dict>spec).get("preemptionDelay") is not None
    ):
        return NO
    annotations = str_map(meta.get("annotations"))
    if annotations is NO:
        return NO
    min_member = (<dict>spec).get("minMember")
    if min_member is not None and (type(min_member) is not int or min_member < 0):
        return NO
    uid = opt_str(meta.get("uid"))
    labels = str_map(meta.get("labels"))
    created = cache.time(meta.get("creationTimestamp"))
    queue = opt_str((<dict>spec).get("queue"))
    priority_class = opt_str((<dict>spec).get("priorityClassName"))
    preemptibility = opt_str((<dict>spec).get("preemptibility"))
    if annotations is EMPTY_MAP:
        last_start = stale = last_eviction = None
    else:
        last_start = cache.time((<dict>annotations).get(ANNOTATION_LAST_START))
        stale = cache.time((<dict>annotations).get(ANNOTATION_STALE))
        last_eviction = cache.time((<dict>annotations).get(ANNOTATION_LAST_EVICTION))
    if (
        uid is NO or labels is NO or created is NO or queue is NO or priority_class is NO
        or preemptibility is NO or last_start is NO or stale is NO or last_eviction is NO
    ):
        return NO
    fields = (
        name, namespace, uid or "", labels, annotations, EMPTY, created, min_member,
        queue or None, priority_class or None, preemptibility or None, None, None,
        last_start, stale, last_eviction, source,
    )
    return make(PodGroupObject, GROUP_DIRECT, GROUP_OFF, fields)


cdef object taints(object value):
    """spec.taints of a node, or NO."""
    if value is None:
        return []
    rows = string_rows(value, TAINT_FIELDS)
    if rows is NO:
        return NO
    out = []
    for key, val, effect in <list>rows:
        if not key:
            return NO
        out.append(Taint(key, val or "", effect or ""))
    return out


cdef object condition_statuses(object value):
    """type -> status of a node's status.conditions (their times are not read), or NO."""
    if value is None:
        return {}
    rows = string_rows(value, CONDITION_FIELDS)
    if rows is NO:
        return NO
    return {ctype: status or "" for ctype, status in <list>rows if ctype}


cdef object node(_Cache cache, dict obj, dict meta, str name, object source):
    """The NodeObject of a usual Node manifest, or NO."""
    parts = spec_and_status(obj)
    if parts is NO:
        return NO
    spec, status = <tuple>parts
    unschedulable = (<dict>spec).get("unschedulable")
    if unschedulable is None:
        unschedulable = False
    elif type(unschedulable) is not bool:
        return NO
    tainted = taints((<dict>spec).get("taints"))
    allocatable = (<dict>status).get("allocatable")
    if allocatable is None:
        allocatable = (<dict>status).get("capacity")  # Kubernetes' default
    resources = cache.resources(allocatable)
    statuses = condition_statuses((<dict>status).get("conditions"))
    labels = str_map(meta.get("labels"))
    annotations = str_map(meta.get("annotations"))
    if tainted is NO or resources is NO or statuses is NO or labels is NO or annotations is NO:
        return NO
    ready = (<dict>statuses).get("Ready")
    pressure = [c for c in PRESSURE_CONDITIONS if (<dict>statuses).get(c) == "True"]
    fields = (
        name, labels, annotations, tainted, unschedulable, resources,
        ready is None or ready == "True", pressure, source,
    )
    return make(NodeObject, NODE_DIRECT, NODE_OFF, fields)


cdef bint add_node(object builder, _Cache cache, dict obj, object file, object index) except -1:
    """Convert and add one usual Node; False to leave it to the loader."""
    if obj.get("apiVersion") != "v1":
        return False
    meta = obj.get("metadata")
    if type(meta) is not dict:
        return False
    name = (<dict>meta).get("name")
    if type(name) is not str or not name:
        return False
    key = ("Node", None, name)
    cdef dict seen = builder._seen
    where = (file, index)
    if seen.setdefault(key, where) is not where:
        return False  # the loader reports the duplicate
    made = node(cache, obj, <dict>meta, name, cache.source_of(file, index))
    if made is NO:
        del seen[key]  # the loader takes the node
        return False
    (<list>builder.out.nodes).append(made)
    return True


cdef bint add_one(object builder, _Cache cache, object obj, object file, object index) except -1:
    """Convert and add one usual Pod, PodGroup or Node; False to leave it to the loader."""
    if type(obj) is not dict:
        return False
    found = (<dict>obj).get("kind")
    if type(found) is not str:
        return False
    cdef str kind = <str>found
    if kind == "Node":
        return add_node(builder, cache, <dict>obj, file, index)
    found = (<dict>obj).get("apiVersion")
    if type(found) is not str:
        return False
    cdef str api_version = <str>found
    if kind == "Pod":
        if api_version != "v1":
            return False
    elif kind == "PodGroup":
        if not api_version.startswith(KAI_GROUPS) or api_version.count("/") != 1:
            return False
    else:
        return False
    meta = (<dict>obj).get("metadata")
    names = meta_name(meta)
    if names is NO:
        return False
    name, namespace = <tuple>names
    key = (kind, namespace, name)
    cdef dict seen = builder._seen
    where = (file, index)
    if seen.setdefault(key, where) is not where:
        return False  # the loader reports the duplicate
    source = cache.source_of(file, index)
    out = builder.out
    if kind == "Pod":
        made = pod(cache, <dict>obj, <dict>meta, name, namespace, source)
        if made is NO:
            del seen[key]  # the loader takes the pod
            return False
        requests = made.requests
        # Pods of one workload share one requests map (objects are read-only).
        shared = (<dict>builder._requests).setdefault(tuple(requests.items()), requests)
        if shared is not requests:
            made.requests = shared
        (<list>out.pods).append(made)
    else:
        made = pod_group(cache, <dict>obj, <dict>meta, name, namespace, source)
        if made is NO:
            del seen[key]  # the loader takes the pod group
            return False
        (<list>out.pod_groups).append(made)
    return True


def new_cache():
    """A parse cache for add() (a builder's ``_fast_cache``), to share between builders."""
    return _Cache()


def add(builder, obj, file, index):
    """Convert and add one top-level object; False to leave it to the loader."""
    cache = builder._fast_cache
    if cache is None:
        cache = builder._fast_cache = _Cache()
    return add_one(builder, <_Cache>cache, obj, file, index)


def add_items(builder, items, file, index, str prefix, inherited):
    """Add the items of a List document: each one this module does not take goes to
    ``builder._add_item`` (which reports input errors), in order."""
    cache = builder._fast_cache
    if cache is None:
        cache = builder._fast_cache = _Cache()
    add_any = builder._add_item
    cdef Py_ssize_t i
    for i in range(len(items)):
        item = items[i]
        if item is None:
            continue
        if add_one(builder, <_Cache>cache, item, file, index):
            continue
        add_any(item, file, index, f"{prefix}items[{i}]", inherited)


def direct():
    """Whether parsed pods, pod groups and nodes are written slot by slot."""
    return bool(POD_DIRECT and GROUP_DIRECT and NODE_DIRECT)
