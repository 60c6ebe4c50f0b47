/* raft_metrics(): a node's figures in the Prometheus text exposition
 * format (version 0.0.4), rendered from the same copy of its state that
 * raft_status() renders as JSON (status.h), for a scraper (the daemon's
 * metrics_listen= endpoint) or any SQL caller. docs/reference.md "Metrics"
 * lists every metric. */

#ifndef EXT_METRICS_H
#define EXT_METRICS_H

#include "status.h"

/* The Content-Type of the text metrics_text renders. */
#define EXT_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* metrics_text renders @v (status_view) and @x (what the other parts of
 * the node add, as status_json takes it) as Prometheus text: a HELP and a
 * TYPE line per metric family, then its samples, ending in a newline.
 * Returns the text (malloc'd, the caller frees it), or NULL when out of
 * memory. Any thread. */
char *metrics_text(const struct ext_status_view *v,
                   const struct ext_status_extra *x);

#endif /* EXT_METRICS_H */
