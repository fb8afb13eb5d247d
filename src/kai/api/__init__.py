"""The scheduling model: resources, nodes, pods (tasks), pod groups (jobs), queues."""
