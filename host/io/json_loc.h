/* Where a value sits in JSON text, and how a message quotes a value: helpers for the readers
 * of JSON files whose errors must point at a line and a column (model files today).
 *
 * jansson reports a line and column for syntax errors only; a parsed value carries no
 * position. tpu__json_locate walks the text (already known to be valid JSON) again along a
 * path of keys and indices to the value at fault: a scan that runs only when a message is
 * written. Columns count characters (UTF-8 sequences) from 1, as jansson's do, so syntax
 * errors and the others point the same way. Private to host/. */
#ifndef TPUSIM_HOST_IO_JSON_LOC_H
#define TPUSIM_HOST_IO_JSON_LOC_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

/* One step of a path into a document: an object's key, or an array's index (key NULL). */
struct tpu__json_step {
    const char *key;
    size_t index;
};

/* The line and column (from 1) of the value at `path` (n steps) in valid JSON text[0..len),
 * or of its key when at_key and the last step is a key. Where the path cannot be followed
 * (never, for a path read off the document jansson parsed from the same text), the place
 * where it stopped. */
void tpu__json_locate(const char *text, size_t len, const struct tpu__json_step *path,
                      size_t n, bool at_key, int *line, int *col);

/* A value as a message quotes it: 0, 2.5, 10.0 (a real written whole), the string "relu"
 * (made safe by tpu__quote), true, null, an array of 2, an object. Returns buf. */
const char *tpu__json_describe(const json_t *v, char *buf, size_t n);

#endif
