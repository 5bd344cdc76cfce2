/*
 * loader_example.c — the README's C example, compiled against an installed
 * libnostall by tests/cli_install.sh so the README stays true.
 *
 *   cc loader_example.c $(pkg-config --cflags --libs nostall) -o loader_example
 *   ./loader_example /data/train
 */
#include <nostall.h>
#include <stdio.h>

/* Stand-in for the training step. */
static double train_step(const void *images, const int64_t *labels, uint32_t count)
{
    double s = 0;
    for (uint32_t i = 0; i < count; i++) s += (double)labels[i];
    return s + (images ? 0 : 1);
}

int main(int argc, char **argv)
{
    nostall_config *cfg;
    nostall_loader *ld;
    nostall_batch b;
    unsigned long long items = 0, epochs = 0;

    if (argc < 2) {
        fprintf(stderr, "usage: %s DATA\n", argv[0]);
        return 2;
    }
    if (nostall_config_create(&cfg) < 0) return 1;
    nostall_config_set(cfg, "batch_size", "16");
    nostall_config_set(cfg, "epochs", "2");
    if (nostall_loader_create(&ld, argv[1], cfg) < 0) {
        fprintf(stderr, "%s\n", nostall_last_error());
        nostall_config_free(cfg);
        return 1;
    }
    nostall_config_free(cfg); /* the loader keeps its own copy */

    for (;;) {
        int rc = nostall_loader_next(ld, &b);
        if (rc == NOSTALL_DONE) break; /* all epochs delivered */
        if (rc == NOSTALL_EPOCH_END) {
            epochs++;
            continue;
        }
        if (rc < 0) {
            fprintf(stderr, "%s\n", nostall_last_error());
            break;
        }
        /* b.images: b.count x 3 x 224 x 224 float32, b.labels: int64 */
        train_step(b.images, b.labels, b.count);
        items += b.count;
        nostall_loader_release(ld, &b); /* the slot goes back to the ring */
    }
    nostall_loader_free(ld);
    printf("%llu items in %llu epochs\n", items, epochs);
    return 0;
}
