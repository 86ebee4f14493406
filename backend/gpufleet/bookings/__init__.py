"""Bookings: GPUs held ahead for one member (or blocked for maintenance) over a window of time.

``times`` reads the instants a person gives (in a zone of theirs or UTC) and says which field is wrong;
``windows`` finds GPUs free over a window and the next window that is; ``service`` creates, lists and
cancels bookings within the admin's limits. The database refuses two bookings of one GPU that overlap
(gpufleet.db.bookings); the scheduler reads the same rows (gpufleet.scheduling.bookings). docs/bookings.md.
"""
