/* The chip presets compiled into the library (generated from the JSON files in configs/).
 * Internal. */
#ifndef TPUSIM_SIM_PRESETS_H
#define TPUSIM_SIM_PRESETS_H

struct tpu__preset {
    const char *name; /* file name without .json */
    const char *json; /* the file's text */
};

/* Terminated by an entry whose name is NULL. */
extern const struct tpu__preset tpu__presets[];

#endif
