/* What the node runtime tells the rest of its process: a node publishes
 * its state changes here, and the SQL surface (the guard) subscribes when
 * it tracks its first connection (none tracked, nothing to expire), so
 * that the runtime never calls the surface by name. */

#ifndef EXT_EVENTS_H
#define EXT_EVENTS_H

/* What happened to a node. */
enum ext_event {
    EXT_EVENT_STALE = 1, /* a node turned stale (staleness.h), or starts
                            bounded by max_staleness_ms= (stale until it
                            hears from a leader): reads authorized before
                            must be authorized again */
    EXT_EVENT_TICK = 2,  /* a node's loop ticked: work an earlier event
                            left undone may be retried */
};

/* A subscriber: called with the event (enum ext_event) and the @arg it
 * subscribed with, on the thread that publishes it (a node's loop thread,
 * or the one starting the node). It must not block, nor subscribe. */
typedef void (*ext_event_cb)(int event, void *arg);

/* Most subscribers of a process. */
#define EXT_EVENTS_MAX 8

/* ext_events_subscribe has @cb called with @arg for every event published
 * from now on; subscribing the same @cb and @arg again changes nothing.
 * Subscribers stay for the life of the process. Errors: RAFT_NOMEM when
 * EXT_EVENTS_MAX subscribers are there. Any thread. */
int ext_events_subscribe(ext_event_cb cb, void *arg);

/* ext_events_publish calls every subscriber with @event (enum ext_event),
 * in the order they subscribed. Any thread. */
void ext_events_publish(int event);

#endif /* EXT_EVENTS_H */
