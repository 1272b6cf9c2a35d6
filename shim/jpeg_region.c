/* Decode only the part of a JPEG that a crop needs, with libjpeg-turbo (libjpeg API):
 * scaled IDCT (1/2, 1/4, 1/8), jpeg_crop_scanline for the columns and jpeg_skip_scanlines /
 * an early stop for the rows. Called from src/data/imagenet/region.rs.
 *
 * Errors: libjpeg reports fatal errors through error_exit, which jumps back (setjmp/longjmp)
 * into the C function that called libjpeg; no Rust frame lies between them. The message is
 * copied into the caller's buffer. A premature end of the file (libjpeg's warning
 * JWRN_JPEG_EOF, after which it would fill the rest with grey) is an error too, as PIL makes it
 * one; other warnings (e.g. extraneous bytes before a marker) are not, as for PIL.
 */
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>

struct mr_jpeg_error {
  struct jpeg_error_mgr pub;
  jmp_buf jump;
  int premature_end;
};

typedef struct MrJpeg {
  struct jpeg_decompress_struct cinfo;
  struct mr_jpeg_error err;
  char message[JMSG_LENGTH_MAX];
} MrJpeg;

static void mr_error_exit(j_common_ptr cinfo) {
  MrJpeg *j = (MrJpeg *)((char *)cinfo - offsetof(MrJpeg, cinfo));
  (*cinfo->err->format_message)(cinfo, j->message);
  longjmp(j->err.jump, 1);
}

static void mr_emit_message(j_common_ptr cinfo, int level) {
  MrJpeg *j = (MrJpeg *)((char *)cinfo - offsetof(MrJpeg, cinfo));
  if (level < 0) {
    cinfo->err->num_warnings++;
    if (cinfo->err->msg_code == JWRN_JPEG_EOF) j->err.premature_end = 1;
  }
}

static void mr_output_message(j_common_ptr cinfo) { (void)cinfo; }

static void copy_message(const char *from, char *msg, size_t msg_len) {
  if (msg_len == 0) return;
  snprintf(msg, msg_len, "%s", from);
}

/* Read the headers of `len` bytes at `data` (which must outlive the handle). On success
 * *out is a handle (free with mr_jpeg_free), *width and *height the image's size and
 * *components its colour components (1 grey, 3 YCbCr/RGB, 4 CMYK/YCCK). Returns 0, or -1 with
 * a message in msg. */
int mr_jpeg_open(const uint8_t *data, size_t len, MrJpeg **out, uint32_t *width,
                 uint32_t *height, int *components, char *msg, size_t msg_len) {
  *out = NULL;
  if (len > (size_t)0xffffffffu) {
    copy_message("JPEG file over 4 GiB", msg, msg_len);
    return -1;
  }
  MrJpeg *j = (MrJpeg *)calloc(1, sizeof(MrJpeg));
  if (j == NULL) {
    copy_message("out of memory", msg, msg_len);
    return -1;
  }
  j->cinfo.err = jpeg_std_error(&j->err.pub);
  j->err.pub.error_exit = mr_error_exit;
  j->err.pub.emit_message = mr_emit_message;
  j->err.pub.output_message = mr_output_message;
  if (setjmp(j->err.jump)) {
    copy_message(j->message, msg, msg_len);
    jpeg_destroy_decompress(&j->cinfo);
    free(j);
    return -1;
  }
  jpeg_create_decompress(&j->cinfo);
  jpeg_mem_src(&j->cinfo, (const unsigned char *)data, (unsigned long)len);
  if (jpeg_read_header(&j->cinfo, TRUE) != JPEG_HEADER_OK) {
    copy_message("no image in the JPEG file", msg, msg_len);
    jpeg_destroy_decompress(&j->cinfo);
    free(j);
    return -1;
  }
  if (j->err.premature_end) {
    copy_message("Premature end of JPEG file (in the headers)", msg, msg_len);
    jpeg_destroy_decompress(&j->cinfo);
    free(j);
    return -1;
  }
  *width = j->cinfo.image_width;
  *height = j->cinfo.image_height;
  *components = j->cinfo.num_components;
  *out = j;
  return 0;
}

void mr_jpeg_free(MrJpeg *j) {
  if (j == NULL) return;
  jpeg_destroy_decompress(&j->cinfo);
  free(j);
}

/* Decode rows y..y+h and columns x..x+w of the image scaled by 1/denom (denom 1, 2, 4 or 8;
 * the scaled image is ceil(width/denom) x ceil(height/denom)) into `out`, w*h packed RGB
 * pixels. Rows below the region are not decoded. A handle decodes once. Returns 0, or -1 with a
 * message in msg. */
int mr_jpeg_decode_region(MrJpeg *j, uint32_t denom, uint32_t x, uint32_t y, uint32_t w,
                          uint32_t h, uint8_t *out, char *msg, size_t msg_len) {
  struct jpeg_decompress_struct *cinfo = &j->cinfo;
  if (setjmp(j->err.jump)) {
    copy_message(j->message, msg, msg_len);
    jpeg_abort_decompress(cinfo);
    return -1;
  }
  if (denom != 1 && denom != 2 && denom != 4 && denom != 8) {
    snprintf(msg, msg_len, "DCT scale 1/%u is not one of 1, 1/2, 1/4, 1/8", denom);
    return -1;
  }
  int cmyk = cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK;
  cinfo->out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  cinfo->scale_num = 1;
  cinfo->scale_denom = denom;
  cinfo->dct_method = JDCT_ISLOW;
  jpeg_start_decompress(cinfo);
  uint32_t sw = cinfo->output_width, sh = cinfo->output_height;
  if (w == 0 || h == 0 || (uint64_t)x + w > sw || (uint64_t)y + h > sh) {
    snprintf(msg, msg_len, "region %ux%u at (%u, %u) is outside the %ux%u image at scale 1/%u",
             w, h, x, y, sw, sh, denom);
    jpeg_abort_decompress(cinfo);
    return -1;
  }
  JDIMENSION xo = x, wo = w;
  if (w < sw) jpeg_crop_scanline(cinfo, &xo, &wo);
  /* After cropping, scanlines hold columns xo..xo+wo; ours start at x - xo. */
  int comps = cinfo->output_components;
  if (comps != (cmyk ? 4 : 3) || xo > x || xo + wo < x + w) {
    snprintf(msg, msg_len, "libjpeg gave %d components and columns %u..%u for %u..%u", comps,
             (unsigned)xo, (unsigned)(xo + wo), x, x + w);
    jpeg_abort_decompress(cinfo);
    return -1;
  }
  JSAMPARRAY row =
      (*cinfo->mem->alloc_sarray)((j_common_ptr)cinfo, JPOOL_IMAGE, wo * (JDIMENSION)comps, 1);
  if (y > 0) {
    JDIMENSION skipped = jpeg_skip_scanlines(cinfo, y);
    if (skipped != y) {
      snprintf(msg, msg_len, "could skip only %u of %u rows", (unsigned)skipped, y);
      jpeg_abort_decompress(cinfo);
      return -1;
    }
  }
  size_t first = (size_t)(x - xo) * (size_t)comps;
  for (uint32_t r = 0; r < h; r++) {
    if (jpeg_read_scanlines(cinfo, row, 1) != 1) {
      snprintf(msg, msg_len, "row %u of the region could not be decoded", y + r);
      jpeg_abort_decompress(cinfo);
      return -1;
    }
    uint8_t *dst = out + (size_t)r * w * 3;
    const JSAMPLE *src = row[0] + first;
    if (!cmyk) {
      memcpy(dst, src, (size_t)w * 3);
    } else {
      /* Adobe stores CMYK inverted: RGB = C*K/255 etc., as PIL's CMYK -> RGB does. */
      for (uint32_t i = 0; i < w; i++) {
        unsigned k = src[4 * i + 3];
        dst[3 * i + 0] = (uint8_t)((src[4 * i + 0] * k + 127) / 255);
        dst[3 * i + 1] = (uint8_t)((src[4 * i + 1] * k + 127) / 255);
        dst[3 * i + 2] = (uint8_t)((src[4 * i + 2] * k + 127) / 255);
      }
    }
    if (j->err.premature_end) break;
  }
  jpeg_abort_decompress(cinfo);
  if (j->err.premature_end) {
    copy_message("Premature end of JPEG file (truncated)", msg, msg_len);
    return -1;
  }
  return 0;
}
