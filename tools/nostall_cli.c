/*
 * nostall_cli.c — the `nostall` command-line tool: dispatches to subcommands.
 * Uses only the public header (plus libjpeg/libpng in gen.c for encoding).
 */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "nostall.h"

static void usage(FILE *f)
{
    fprintf(f,
            "nostall %s — data loading for deep-learning training\n"
            "\n"
            "usage: nostall COMMAND [ARGS]\n"
            "\n"
            "commands:\n"
            "  gen OUT_DIR [options]   write a synthetic, learnable ImageFolder dataset of JPEGs\n"
            "  bench DATA [options]    run the loader over DATA and report throughput and stalls\n"
            "  transcode SRC DST       copy a dataset, adding JPEG restart markers (lossless) so\n"
            "                          crops decode only the rows they need\n"
            "  analyze DATA [options]  measure where the data stall comes from; predict what\n"
            "                          cache, cores, storage or echoing would change\n"
            "  pack SRC DST [options]  write a dataset as WebDataset tar shards with index files\n"
            "  serve SOURCE [options]  prepare items for loaders on other hosts (prep_servers)\n"
            "\n"
            "`nostall COMMAND --help` describes each command's options.\n",
            nostall_version_string());
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("nostall %s\n", nostall_version_string());
        return 0;
    }
    if (!strcmp(cmd, "gen")) return cmd_gen(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "transcode")) return cmd_transcode(argc - 1, argv + 1);
    if (!strcmp(cmd, "analyze")) return cmd_analyze(argc - 1, argv + 1);
    if (!strcmp(cmd, "pack")) return cmd_pack(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve")) return cmd_serve(argc - 1, argv + 1);
    fprintf(stderr, "nostall: unknown command '%s' (try nostall --help)\n", cmd);
    return 2;
}
