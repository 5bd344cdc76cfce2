/*
 * gen.h — what `nostall gen`'s two generators share: the classification
 * generator (gen.c, ImageFolder) and the detection one (gen_detect.c, COCO).
 */
#ifndef NOSTALL_TOOLS_GEN_H
#define NOSTALL_TOOLS_GEN_H

#include <stdint.h>

/* --task: which generator; each generator's table accepts all three
 * (cmd_gen dispatches on the last one given). */
#define GEN_TASKS "classify|detect|audio"
enum { GEN_TASK_CLASSIFY, GEN_TASK_DETECT, GEN_TASK_AUDIO };

/* Write w x h RGB8 pixels (rows of 3 * w bytes) to `path` via `path.tmp` +
 * rename, as JPEG of `quality` or PNG (png != 0). Returns the file size,
 * or -1 after a message on stderr naming the file. */
long long gen_write_rgb(const char *path, const uint8_t *rgb, int w, int h, int png, int quality);

/* `nostall gen --task detect`: argv as cmd_gen's. */
int cmd_gen_detect(int argc, char **argv);
/* `nostall gen --task audio` (gen_audio.c): argv as cmd_gen's. */
int gen_audio_main(int argc, char **argv);

#endif
