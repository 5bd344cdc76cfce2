/*
 * nvjpeg_api.h — the libnvjpeg functions the nvJPEG backend calls, in one
 * list: cuda_probe.c checks each is in the libnvjpeg it opens (dlopen),
 * cuda_nvjpeg.c resolves them into its function table. Built only with
 * CUDA; names only, no nvjpeg.h needed here.
 */
#ifndef NST_GPU_NVJPEG_API_H
#define NST_GPU_NVJPEG_API_H

#define NVJ_FN(X)                                                                                  \
    X(nvjpegCreateEx)                                                                              \
    X(nvjpegDestroy)                                                                               \
    X(nvjpegJpegStateCreate)                                                                       \
    X(nvjpegJpegStateDestroy)                                                                      \
    X(nvjpegDecoderCreate)                                                                         \
    X(nvjpegDecoderDestroy)                                                                        \
    X(nvjpegDecoderStateCreate)                                                                    \
    X(nvjpegDecoderJpegSupported)                                                                  \
    X(nvjpegDecodeParamsCreate)                                                                    \
    X(nvjpegDecodeParamsDestroy)                                                                   \
    X(nvjpegDecodeParamsSetROI)                                                                    \
    X(nvjpegDecodeParamsSetOutputFormat)                                                           \
    X(nvjpegJpegStreamCreate)                                                                      \
    X(nvjpegJpegStreamDestroy)                                                                     \
    X(nvjpegJpegStreamParse)                                                                       \
    X(nvjpegDecodeBatchedSupportedEx)                                                              \
    X(nvjpegDecodeBatchedInitialize)                                                               \
    X(nvjpegDecodeBatchedEx)                                                                       \
    X(nvjpegDecodeJpeg)

#endif
