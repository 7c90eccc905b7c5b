/* Fuzz target: a JSON model file (`tpusim train --model FILE`, `tpusim model show FILE`),
 * read by tpu_net_load_file() from a file as the CLI does. Besides "no crash": a failure's
 * message starts with the file's path (every model-file error names the file), and a net
 * that loads is whole: at least one layer besides the input, every layer readable with a
 * non-empty output shape and inputs that come before it, and its output set. */
#include "fuzz_util.h"
#include "tpusim/net.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fuzz_dir dir;
    fuzz_dir_open(&dir);
    const char *path = fuzz_dir_write(&dir, "model.json", data, size);
    struct tpu_net *net = NULL;
    struct tpu_diag d = {0};
    int rc = tpu_net_load_file(path, &net, &d);
    fuzz_check_diag("tpu_net_load_file", rc, &d);
    if (rc < 0 && (net || strncmp(d.msg, path, strlen(path)) != 0)) {
        fprintf(stderr, "fuzz harness: a failure must leave no net and name the file '%s': "
                "%s\n", path, d.msg);
        abort();
    }
    if (rc == 0) {
        uint32_t n = tpu_net_n_layers(net), out;
        enum tpu_loss loss;
        if (n < 2 || tpu_net_output(net, &out, &loss) != 0 || out == 0 || out >= n)
            fuzz_die("a net without layers or output from", path);
        for (uint32_t i = 0; i < n; i++) {
            struct tpu_layer_info li;
            if (tpu_net_layer(net, i, &li) != 0 || !li.name || !li.name[0] || !li.out.h ||
                !li.out.w || !li.out.c)
                fuzz_die("an unreadable layer from", path);
            for (uint32_t k = 0; k < li.n_in; k++)
                if (li.in[k] >= i)
                    fuzz_die("a layer reading a later tensor from", path);
        }
        tpu_net_destroy(&net);
    }
    fuzz_dir_close(&dir);
    return 0;
}
