/* transcode.c — placeholder until the restart-marker transcoder lands. */
#include <stdio.h>

#include "commands.h"

int cmd_transcode(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "nostall transcode: not available in this build\n");
    return 1;
}
