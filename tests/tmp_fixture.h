/* A test fixture holding a fresh directory under /tmp: setup makes it from a mkdtemp
 * template, teardown removes every file in it (subdirectories one level deep too), then the
 * directory. Include after <cmocka.h>. */
#ifndef TPUSIM_TESTS_TMP_FIXTURE_H
#define TPUSIM_TESTS_TMP_FIXTURE_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct fixture {
    char dir[64];
};

/* template ends in XXXXXX and fits fixture.dir. */
static inline int tmp_fixture_setup(void **state, const char *template)
{
    struct fixture *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    snprintf(f->dir, sizeof f->dir, "%s", template);
    if (!mkdtemp(f->dir)) {
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static inline void remove_tree(const char *dir)
{
    DIR *dp = opendir(dir);
    if (!dp)
        return;
    struct dirent *e;
    char path[512];
    while ((e = readdir(dp))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        int len = snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (len < 0 || (size_t)len >= sizeof path)
            continue;
        struct stat st;
        if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
            remove_tree(path);
        else
            unlink(path);
    }
    closedir(dp);
    rmdir(dir);
}

static inline int teardown(void **state)
{
    struct fixture *f = *state;
    remove_tree(f->dir);
    free(f);
    return 0;
}

#endif
